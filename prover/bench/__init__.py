"""``prover bench``: a matrix of credit methods x envs x seeds trained with equal step budgets, and the
ProVer paper's three tables (success, cost per step, judges) plus learning curves from it.

    matrix.py   the matrix config (pydantic), name checks, the cells it plans
    runner.py   runs the cells (shared warm starts, finished cells skipped, resume), writes the reports
    tables.py   Tables 1-3 from the cells' metrics.jsonl, as Markdown and CSV
    plots.py    learning curves per env (matplotlib, Agg)
    command.py  the CLI subcommand
"""
