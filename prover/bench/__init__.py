"""``prover bench``: a matrix of credit methods x envs x seeds trained with equal step budgets, and the
ProVer paper's three tables (success, cost per step, judges) plus learning curves from it.

    config.py   the matrix config (pydantic): methods, envs, seeds, settings, baseline row, power, reach level
    matrix.py   name checks, the cells it plans
    runner.py   runs the cells (shared warm starts, finished cells skipped, resume), writes the reports
    timing.py   measured seconds per step (<dir>/timings.json) and the time estimate
    tables.py   the numbers of Tables 1-3 from the cells' metrics.jsonl
    stats.py    bootstrap CIs over seeds, paired differences (t interval, sign-flip p, P(improvement)),
                AUC, steps to reach, evaluation SE
    headline.py the headline comparison (power.compare): its verdict, and the seeds a pilot says it needs
    report.py   Tables 1-3 as Markdown and CSV
    plots.py    learning curves per env (matplotlib, Agg)
    forest.py   the forest plot of the paired differences against the baseline (forest.svg, no matplotlib)
    command.py  the CLI subcommand
"""
