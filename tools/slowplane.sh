#!/usr/bin/env bash
# slowplane.sh REV_A REV_B [RUNS]
#
# Measures, as root, a connection whose plane 1 leaves through a slow qdisc
# of its own, at two revisions, their runs alternated (docs/results.md, "A
# plane whose own queue is slower"). Two network namespaces are joined by
# two veth pairs, one a plane; a tbf of TBF_RATE (500mbit, burst 32kb,
# limit 65536) sits on plane 1's veth in the sending namespace. Each run
# moves SIZE_MIB (256) with `mroce send --json` to `mroce recv
# --inbound-gbps 10` and prints the goodput, the packets the sender put on
# each plane and the packets its host dropped. Then, once a side: plane 0
# alone, both planes without the tbf, two connections at once (one a plane),
# and RUNS runs of a tbf on the only plane (64 MiB). The namespaces are
# removed at the end of every run.
#
# Example: sudo tools/slowplane.sh a0e20b6 HEAD 3
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slowplane.sh needs root: it makes namespaces, veth links and tc qdiscs" >&2; exit 1; }
a=$1 b=$2 runs=${3:-3}
rate=${TBF_RATE:-500mbit} size=${SIZE_MIB:-256}
nsA=mroce-sp-a$$ nsB=mroce-sp-b$$

root=$(git rev-parse --show-toplevel)
. "$(dirname "$0")/revs.sh"
with_namespaces "$nsA" "$nsB"
build_rev "$work" a "$a"
build_rev "$work" b "$b"

# testbed makes the two namespaces and planes, with the tbf on the veth
# named in $1 (none: "").
testbed() {
	ip netns del "$nsA" 2>/dev/null || true
	ip netns del "$nsB" 2>/dev/null || true
	ip netns add "$nsA"
	ip netns add "$nsB"
	for p in 0 1; do
		ip -n "$nsA" link add "v$p" type veth peer name "v$p" netns "$nsB"
		ip -n "$nsA" addr add "10.99.$p.1/24" dev "v$p"
		ip -n "$nsB" addr add "10.99.$p.2/24" dev "v$p"
		ip -n "$nsA" link set "v$p" up
		ip -n "$nsB" link set "v$p" up
	done
	[ -z "$1" ] || ip netns exec "$nsA" tc qdisc add dev "$1" root tbf rate "$rate" burst 32kb limit 65536
}

# summary prints a send report's goodput, packets a plane and host drops.
summary() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
planes = {}
for p in d["paths_detail"]:
    planes[p["plane"]] = planes.get(p["plane"], 0) + p["packets"]
print("%.3f Gb/s, packets by plane %s, %d dropped by the host" % (d["end"]["gbps"],
      " / ".join(str(planes[k]) for k in sorted(planes)), d["end"]["local_drops"]))' "$1"
}

# transfer runs side $1 once: recv on the addresses $2 (port $4), send to
# them from $3, $5 MiB, and prints the summary.
transfer() {
	local bin=$work/mroce-$1 out=$work/send-$1-$4.json
	ip netns exec "$nsB" "$bin" recv --listen "$2" --port "$4" --inbound-gbps 10 >/dev/null 2>&1 &
	sleep 0.5
	ip netns exec "$nsA" "$bin" send --to "$2" --local "$3" --port "$4" --size-mib "$5" --json >"$out"
	wait
	summary "$out"
}

two=(10.99.0.2,10.99.1.2 10.99.0.1,10.99.1.1)
for i in $(seq "$runs"); do
	for side in a b; do
		testbed v1
		echo "$side two planes, tbf on plane 1: $(transfer "$side" "${two[@]}" 4797 "$size")"
	done
done
for side in a b; do
	testbed v1
	echo "$side plane 0 alone: $(transfer "$side" 10.99.0.2 10.99.0.1 4797 "$size")"
	testbed ""
	echo "$side two planes, no tbf: $(transfer "$side" "${two[@]}" 4797 "$size")"
	testbed v1
	transfer "$side" 10.99.0.2 10.99.0.1 4797 "$size" >/dev/null &
	p1=$(transfer "$side" 10.99.1.2 10.99.1.1 4798 64)
	wait
	echo "$side two connections, one a plane: plane 0 $(summary "$work/send-$side-4797.json"); plane 1 $p1"
done
for i in $(seq "$runs"); do
	for side in a b; do
		testbed v0
		echo "$side tbf on the only plane: $(transfer "$side" 10.99.0.2 10.99.0.1 4797 64)"
	done
done
