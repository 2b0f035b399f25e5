"""The Git store: the only layer that writes refs and objects.

* :mod:`.repo` opens a repository from any directory of any worktree and knows its common dir;
* :mod:`.refnames` validates ref names without importing pygit2 (hooks use it on their fast path);
* :mod:`.refs` is compare-and-swap on refs, single and batched;
* :mod:`.journal` is a commit chain whose tree is the state, appended by CAS with whole-operation retry;
* :mod:`.notes` adds notes without ever losing or overwriting one;
* :mod:`.private` holds 0600 files outside the work tree, path containment and file locks.

Submodules are imported explicitly; this package imports nothing so that ``import git_agentops.gitstore.private``
does not pay for pygit2.
"""
