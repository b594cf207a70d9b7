# revs.sh, sourced by the tools that compare builds: build_rev builds
# revision $3's mroce into $1/mroce-$2 from a worktree at $1/$2, and
# remove_revs removes $1's worktrees and then $1. Both need $root, the
# repository's top level. with_namespaces makes the scratch directory
# $work and, on exit, deletes the network namespaces it names and $work's
# builds.

build_rev() {
	git -C "$root" worktree add --detach --quiet "$1/$2" "$3"
	(cd "$1/$2" && go build -o "$1/mroce-$2" ./cmd/mroce)
}

remove_revs() {
	local w
	for w in "$1"/*/; do
		[ -d "$w" ] && git -C "$root" worktree remove --force "$w" >/dev/null 2>&1 || true
	done
	rm -rf "$1"
}

with_namespaces() {
	work=$(mktemp -d)
	scratch_namespaces="$*"
	trap remove_namespaces_and_revs EXIT
}

remove_namespaces_and_revs() {
	local ns
	for ns in $scratch_namespaces; do
		ip netns del "$ns" 2>/dev/null || true
	done
	remove_revs "$work"
}
