#!/usr/bin/env bash
# warmpair.sh [PAIRS] [HOSTS...]
#
# Measures what warming events before they fire (mroce sim --warm) does to
# the simulator's speed, against the number of connections: for each count
# of hosts, an all-to-all on 8 planes (hosts x (hosts - 1) connections)
# runs with --warm on and with --warm off, one after the other on every
# core (on first in odd pairs, off first in even ones), and it prints every
# pair's ratio of wall times, on over off, sorted, and their median. Below
# 1, warming is the faster. Messages shrink as the hosts grow, so that each
# run is about a million data packets.
#
# Example: tools/warmpair.sh 6 8 16 32 48 64
set -euo pipefail

pairs=${1:-6}
shift || true
hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=(8 16 32 48 64)
bin=$(mktemp -d)/mroce
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/mroce

wall() { # hosts size-kib warm
	local s e
	s=$(date +%s%N)
	"$bin" sim planes --planes 8 --hosts "$1" --size-kib "$2" --plot "" --warm "$3" >/dev/null
	e=$(date +%s%N)
	echo $((e - s))
}

for h in "${hosts[@]}"; do
	kib=$((4000000 / (h * (h - 1))))
	ratios=()
	for i in $(seq "$pairs"); do
		if ((i % 2)); then off=$(wall "$h" "$kib" off); on=$(wall "$h" "$kib" on)
		else on=$(wall "$h" "$kib" on); off=$(wall "$h" "$kib" off); fi
		ratios+=("$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }')")
	done
	sorted=$(printf '%s\n' "${ratios[@]}" | sort -n)
	median=$(echo "$sorted" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
	printf '%3d hosts, %5d connections, %6d KiB: on/off %s  median %s\n' \
		"$h" $((h * (h - 1))) "$kib" "$(echo "$sorted" | tr '\n' ' ')" "$median"
done
