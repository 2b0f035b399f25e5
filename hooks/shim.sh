#!/bin/sh
# git-agentops hook shim: @HOOK@
# Written by 'git agentops-init'; 'git agentops-init --uninstall-hooks' removes it and puts back the hook that
# was here before (kept meanwhile as @HOOK@.legacy, and run first). Reinstalling rewrites this file.
hook=@HOOK@
python=@PYTHON@
module=@MODULE@
legacy="$0.legacy"
if [ -n "${AGENTOPS_HOOK-}" ]; then # a git command run by our own hook: do not recurse
    [ -x "$legacy" ] && exec "$legacy" "$@"
    exit 0
fi
case $hook in
pre-push | pre-receive | reference-transaction)
    # every ref update git makes runs reference-transaction: only "prepared" can concern us
    [ "$hook" != reference-transaction ] || [ "$1" = prepared ] || [ -x "$legacy" ] || exit 0
    input=$(cat; echo .) # buffered (trailing newlines kept): the previous hook and ours read the same bytes
    input=${input%.}
    if [ -x "$legacy" ]; then printf '%s' "$input" | "$legacy" "$@" || exit $?; fi
    ;;
*) if [ -x "$legacy" ]; then "$legacy" "$@" || exit $?; fi ;;
esac
if [ "$hook" = reference-transaction ]; then
    [ "$1" = prepared ] || exit 0
    case $input in *refs/agentops/* | *refs/notes/agentops/*) ;; *) exit 0 ;; esac
fi
AGENTOPS_HOOK=1
export AGENTOPS_HOOK
if command -v git-agentops-hook >/dev/null 2>&1; then
    set -- git-agentops-hook "$hook" "$@"
elif [ -x "$python" ] && [ -f "$module" ]; then
    set -- "$python" -m git_agentops.cli.hook "$hook" "$@"
else
    printf '%s\n' "warning: no git-agentops-hook on PATH and no $module: the git-agentops $hook hook did not run" >&2
    exit 0
fi
case $hook in
pre-push | pre-receive | reference-transaction) printf '%s' "$input" | "$@" ;;
*) exec "$@" ;;
esac
