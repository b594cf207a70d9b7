#!/usr/bin/env bash
# speedpair.sh REV_A REV_B [PAIRS] [-- ARGS...]
#
# Compares the simulator's speed at two revisions on a machine whose speed
# drifts from one minute to the next (a shared virtual machine): builds
# mroce at each, runs the same command with both at once, one on each of
# two cores (taskset), swapping the cores from one pair to the next, and
# prints every pair's wall seconds and the median ratio B/A. Both runs of a
# pair meet the same moment of the machine; a ratio below 1 means B is the
# faster. ARGS default to the 4,032-connection run on one core each:
#
#   sim planes --planes 8 --hosts 64 --size-kib 1024 --plot "" --workers 1
#
# Example: tools/speedpair.sh HEAD~3 HEAD 6
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2 pairs=${3:-4}
shift $(( $# >= 3 ? 3 : 2 ))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(sim planes --planes 8 --hosts 64 --size-kib 1024 --plot "" --workers 1)

root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/a" >/dev/null 2>&1 || true
      git -C "$root" worktree remove --force "$work/b" >/dev/null 2>&1 || true
      rm -rf "$work"' EXIT
for side in a b; do
	rev=${!side}
	git -C "$root" worktree add --detach --quiet "$work/$side" "$rev"
	(cd "$work/$side" && go build -o "$work/mroce-$side" ./cmd/mroce)
done

# wall runs the build of one side on one core and prints its seconds.
wall() {
	local start end
	start=$(date +%s%N)
	taskset -c "$2" "$work/mroce-$1" "${args[@]}" >/dev/null
	end=$(date +%s%N)
	echo "scale=3; ($end - $start) / 1000000000" | bc
}

ratios=()
echo "pair  A s     B s     B/A"
for i in $(seq "$pairs"); do
	ca=$(( i % 2 )) cb=$(( (i + 1) % 2 ))
	wall a "$ca" >"$work/ta" & wall b "$cb" >"$work/tb"
	wait
	ta=$(cat "$work/ta") tb=$(cat "$work/tb")
	r=$(echo "scale=4; $tb / $ta" | bc)
	ratios+=("$r")
	printf '%-5s %-7s %-7s %s\n' "$i" "$ta" "$tb" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {print "median B/A", v[int((NR+1)/2)]}'
