#!/usr/bin/env bash
# pacedsend.sh [REV] [RATES]
#
# Measures, as root, how much of what its receiver grants a paced sender
# moves on the kernel path (docs/results.md, "Not built yet"). Two network
# namespaces are joined by one veth of MTU (1500); for each rate R in
# RATES (Gb/s, default "0.1 0.5 1 2 10") `mroce recv --inbound-gbps R`
# receives SIZE_MIB (64) from `mroce send --json`, and the script prints
# the goodput and the CPU seconds of each side. REV (default HEAD) is
# built in a worktree. The namespaces are removed at the end.
#
# Example: sudo tools/pacedsend.sh HEAD "0.5 1 10"
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "pacedsend.sh needs root: it makes namespaces and veth links" >&2; exit 1; }
rev=${1:-HEAD} rates=${2:-0.1 0.5 1 2 10}
mtu=${MTU:-1500} size=${SIZE_MIB:-64}
nsA=mroce-ps-a$$ nsB=mroce-ps-b$$

root=$(git rev-parse --show-toplevel)
. "$(dirname "$0")/revs.sh"
with_namespaces "$nsA" "$nsB"
build_rev "$work" a "$rev"
bin=$work/mroce-a

ip netns add "$nsA"
ip netns add "$nsB"
ip -n "$nsA" link add v0 type veth peer name v0 netns "$nsB"
ip -n "$nsA" addr add 10.98.0.1/24 dev v0
ip -n "$nsB" addr add 10.98.0.2/24 dev v0
ip -n "$nsA" link set v0 mtu "$mtu" up
ip -n "$nsB" link set v0 mtu "$mtu" up

for r in $rates; do
	ip netns exec "$nsB" /usr/bin/time -o "$work/recv.time" -f "%U %S" "$bin" recv --listen 10.98.0.2 --inbound-gbps "$r" >/dev/null 2>&1 &
	sleep 0.5
	ip netns exec "$nsA" /usr/bin/time -o "$work/send.time" -f "%U %S %e" "$bin" send --to 10.98.0.2 --local 10.98.0.1 --size-mib "$size" --json >"$work/send.json"
	wait
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))["end"]
s = [float(x) for x in open(sys.argv[2]).read().split()]
r = [float(x) for x in open(sys.argv[3]).read().split()]
print("granted %s Gb/s: %.3f Gb/s, sender %.2f CPU s, receiver %.2f CPU s, %.2f s" % (sys.argv[4], d["gbps"], s[0] + s[1], r[0] + r[1], s[2]))' \
		"$work/send.json" "$work/send.time" "$work/recv.time" "$r"
done
