#!/usr/bin/env bash
# speedpair.sh [--alternate] [--flags-a FLAGS] [--flags-b FLAGS] REV_A REV_B [PAIRS] [-- ARGS...]
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
# With --alternate the two runs of a pair take every core, one after the
# other (A first in odd pairs, B first in even ones), and ARGS default to
# the same run without --workers 1: a comparison on all the cores, nearer
# in time than two separate series but not at the same moment.
#
# --flags-a and --flags-b add flags to one side's command (split at
# spaces): two settings of one build compare as two revisions do.
#
# Examples: tools/speedpair.sh HEAD~3 HEAD 6
#           tools/speedpair.sh --alternate --flags-a --huge-pages=false HEAD HEAD 8
set -euo pipefail

alternate=false flags_a=() flags_b=()
while [ $# -gt 0 ]; do
	case $1 in
	--alternate) alternate=true; shift ;;
	--flags-a) read -ra flags_a <<<"$2"; shift 2 ;;
	--flags-b) read -ra flags_b <<<"$2"; shift 2 ;;
	*) break ;;
	esac
done
[ $# -ge 2 ] || { sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2 pairs=${3:-4}
shift $(( $# >= 3 ? 3 : 2 ))
[ "${1:-}" = "--" ] && shift
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
	args=(sim planes --planes 8 --hosts 64 --size-kib 1024 --plot "")
	$alternate || args+=(--workers 1)
fi

root=$(git rev-parse --show-toplevel)
. "$(dirname "$0")/revs.sh"
work=$(mktemp -d)
trap 'remove_revs "$work"' EXIT
build_rev "$work" a "$a"
build_rev "$work" b "$b"

# wall runs the build of one side, with its flags, on core $2 (every
# core: "all") and prints its seconds.
wall() {
	local start end cores=() flags
	[ "$2" = all ] || cores=(taskset -c "$2")
	if [ "$1" = a ]; then flags=("${flags_a[@]}"); else flags=("${flags_b[@]}"); fi
	start=$(date +%s%N)
	"${cores[@]}" "$work/mroce-$1" "${args[@]}" "${flags[@]}" >/dev/null
	end=$(date +%s%N)
	echo "scale=3; ($end - $start) / 1000000000" | bc
}

ratios=()
echo "pair  A s     B s     B/A"
for i in $(seq "$pairs"); do
	if $alternate; then
		if (( i % 2 )); then
			wall a all >"$work/ta"; wall b all >"$work/tb"
		else
			wall b all >"$work/tb"; wall a all >"$work/ta"
		fi
	else
		ca=$(( i % 2 )) cb=$(( (i + 1) % 2 ))
		wall a "$ca" >"$work/ta" & wall b "$cb" >"$work/tb"
		wait
	fi
	ta=$(cat "$work/ta") tb=$(cat "$work/tb")
	r=$(echo "scale=4; $tb / $ta" | bc)
	ratios+=("$r")
	printf '%-5s %-7s %-7s %s\n' "$i" "$ta" "$tb" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {print "median B/A", v[int((NR+1)/2)]}'
