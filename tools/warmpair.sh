#!/usr/bin/env bash
# warmpair.sh [PAIRS] [HOSTS...]
#
# Measures what warming events before they fire (mroce sim --warm) does to
# the simulator's speed at HEAD, against the number of connections: for
# each count of hosts, an all-to-all on 8 planes (hosts x (hosts - 1)
# connections) runs with --warm off (A) and --warm on (B), one after the
# other on every core (tools/speedpair.sh --alternate), and it prints each
# count's median ratio of wall times, on over off. Below 1, warming is the
# faster. Messages shrink as the hosts grow, so that each run is about a
# million data packets.
#
# Example: tools/warmpair.sh 6 8 16 32 48 64
set -euo pipefail

pairs=${1:-6}
shift || true
hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=(8 16 32 48 64)
here=$(dirname "$0")

for h in "${hosts[@]}"; do
	kib=$((4000000 / (h * (h - 1))))
	median=$("$here/speedpair.sh" --alternate --flags-a "--warm off" --flags-b "--warm on" HEAD HEAD "$pairs" \
		-- sim planes --planes 8 --hosts "$h" --size-kib "$kib" --plot "" | awk '/^median/ {print $3}')
	printf '%3d hosts, %5d connections, %6d KiB: on/off median %s\n' "$h" $((h * (h - 1))) "$kib" "$median"
done
