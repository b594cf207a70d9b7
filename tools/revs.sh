# revs.sh, sourced by the tools that compare builds: build_rev builds
# revision $3's mroce into $1/mroce-$2 from a worktree at $1/$2, and
# remove_revs removes $1's worktrees and then $1. Both need $root, the
# repository's top level.

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
