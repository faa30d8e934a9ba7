"""The warm pool: runs forked from a zygote that has already imported the heavy modules.

`executor.py` is the PoolExecutor (the parent's side: workspaces, watching, results),
`client.py` starts a zygote and asks it for runs over its control socket, and
`zygote.py` is the zygote itself (standard library only: it runs where mleforge
is not importable, sent as source). `make_executor("pool")` builds the executor.
"""
