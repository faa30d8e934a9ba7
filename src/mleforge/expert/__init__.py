"""The offline template expert: a scripted policy that reads the structured state.

It sits above the agent (it reads states, journals and nodes) and beside the
curriculum; `make_policy("template")` imports `expert.policy` on first use.

    profile.py      what a task looks like to a script (column roles, metric, formats)
    spec.py         what approach a script takes (ScriptSpec, its `# template-spec:` header)
    description.py  one idea sentence per approach
    catalog.py      every approach suited to a task, within a script's time budget
    script.py       the script writer: features.py, models.py, metrics.py (+ snippets.py)
    choice.py       seeded, distinct choices and the completion text
    draft.py, debug.py, improve.py   what to write, stage by stage
    policy.py       TemplatePolicy (make_policy("template"))
    ideas.py        exploration enrichment: idea pools reduced to the most diverse few

Import from the submodules; this package imports nothing itself.
"""
