"""webshop-sim's page after ``click[buy now]``: WebShop's done_page.html as its ``text`` mode reads it.

Derivation, from princeton-nlp/WebShop @64fa2a5 (not from our code):

* ``SimServer.done`` (web_agent_site/envs/web_agent_text_env.py) renders the page through
  ``map_action_to_html('click[Buy Now]', session_id=..., reward=reward, asin=session["asin"],
  options=session["options"], instruction_text=...)``; engine.py's ``map_action_to_html`` passes every
  other variable of web_agent_site/templates/done_page.html as ``kwargs.get(...)``, i.e. None.
* Jinja prints None as ``None`` (``mturk_code``, ``purchased_attrs``, ``category``, ``query``,
  ``product_category``; ``goal | pprint`` and ``reward_info | pprint`` too), and ``goal.asin`` and the
  other ``goal.*`` fields of None as nothing: their ``<pre></pre>`` holds no string at all.
* ``options | tojson`` is Flask's: json with sorted keys, ASCII only, and ``< > & '`` written
  ``\\u003c \\u003e \\u0026 \\u0027``. The keys are the radio buttons' ``name`` lower-cased, the values
  the clicked (lower-cased) argument (``SimServer.item_page``). ``{{ reward }}`` is Python's ``str``.
* ``convert_html_to_text(html, simple=True)`` joins ``t.strip()`` of every string whose parent tag is not
  style, script, head, title, meta or the document, with `` [SEP] ``, dropping strings equal to "\\n"
  (BeautifulSoup 4.11 turns whitespace-only strings that hold a newline into "\\n"). ``tag_visible`` looks
  only at the parent's name, so the ``display:none`` block and ``<h4 hidden>`` are read as well.

Walking the template top to bottom then gives, one string each: h1 "Thank you for shopping with us!";
h3 "Your code: " -> "Your code:"; pre "None"; " (Paste it in your MTurk interface.)"; h2 "Purchased";
h4 "asin" and its pre (the ASIN); "options" and the JSON; "attrs" "None"; "category" "None"; "query"
"None"; "product category" "None"; h2 "Target"; then "asin", "options", "attrs", "price upper",
"instuction text" (sic), "category", "product category", "query", each with an empty pre; "Goal " ->
"Goal" and "None"; h2 "Reward"; h3 "Your score (min 0.0, max 1.0)" and its pre (the reward); the hidden h4
"Reward Details " -> "Reward Details" and "None".
"""

from __future__ import annotations

from prover.envs.webshop_sim import WebshopSimEnv
from prover.envs.webshop_sim.engine import SEP, Page, done_page

# asin B07ABCDEF1, options {"size": "18 inch", "color": "dark blue"} (keys sorted by tojson), reward 0.75
DONE = ("Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) "
        "[SEP] Purchased [SEP] asin [SEP] B07ABCDEF1 [SEP] options [SEP] {\"color\": \"dark blue\", \"size\": "
        "\"18 inch\"} [SEP] attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] None [SEP] product "
        "category [SEP] None [SEP] Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper [SEP] "
        "instuction text [SEP] category [SEP] product category [SEP] query [SEP] Goal [SEP] None [SEP] Reward "
        "[SEP] Your score (min 0.0, max 1.0) [SEP] 0.75 [SEP] Reward Details [SEP] None")


def test_the_done_page_is_webshops_whole_page_in_text_mode():
    page = Page("done", asin="B07ABCDEF1", options=(("size", "18 inch"), ("color", "dark blue")), score=0.75)
    assert SEP.join(done_page(page)) == DONE
    # an option name as the data writes it is lower-cased; tojson escapes ' < > & and non-ASCII; no options
    # is "{}"; the score is str(float): 0.1 * 0.75 prints as 0.07500000000000001
    odd = Page("done", asin="#item 7", options=(("Color", "men's <b> & é"),), score=0.1 * 0.75)
    parts = done_page(odd)
    assert parts[6:9] == ["#item 7", "options", '{"color": "men\\u0027s \\u003cb\\u003e \\u0026 \\u00e9"}']
    assert parts[30] == "0.07500000000000001"
    assert done_page(Page("done", asin="B0", score=1.0))[8::22] == ["{}", "1.0"]


def test_buy_now_shows_the_done_page_and_prover_v0_the_short_form():
    for pages in ("webshop", "prover-v0"):
        env = WebshopSimEnv(pages=pages)
        env.reset(seed=3)
        for _ in range(env.max_steps):
            obs, reward, terminated, truncated, info = env.step(env.expert_action())
            if terminated or truncated:
                break
        assert terminated and info["is_action_valid"] and env.page.name == "done"
        asin, options = env.page.asin, dict(env.page.options)
        if pages == "prover-v0":  # prover's earlier page, kept as it was
            assert obs == SEP.join(["Thank you for shopping with us!", "Purchased", asin,
                                    "Your score (min 0.0, max 1.0)", f"{reward:.2f}"])
            continue
        shown = DONE.replace("B07ABCDEF1", asin).replace("0.75", str(reward))
        opts = ", ".join(f'"{k}": "{v}"' for k, v in sorted(options.items()))  # names and values are plain
        assert obs == shown.replace('{"color": "dark blue", "size": "18 inch"}', "{" + opts + "}")
