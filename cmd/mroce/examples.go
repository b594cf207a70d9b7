package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// examples are command lines each command's --help shows, by the command's
// path. TestEveryCommandHasAnExample checks that every command has some and
// that their flags are the command's.
var examples = map[string][]string{
	"demo":                 {"mroce demo --loss 0.05 --paths 16 --planes 8", "mroce demo --size-mib 8 --trace demo.trace"},
	"send":                 {"mroce send --to 10.0.0.2,10.1.0.2 --size-mib 1024", "mroce send --to receiver.example --psk-file shared.psk data.bin"},
	"recv":                 {"mroce recv --listen 10.0.0.2,10.1.0.2 --out /data/", "mroce recv --listen 127.0.0.1 --metrics 127.0.0.1:9464 --metrics-linger 30s"},
	"bench write_bw":       {"mroce bench write_bw --server --listen 127.0.0.85", "mroce bench write_bw 127.0.0.85 -a --report_gbits"},
	"bench send_bw":        {"mroce bench send_bw --server --listen 127.0.0.85", "mroce bench send_bw --to 127.0.0.85 --size 4096 -t 64"},
	"bench read_bw":        {"mroce bench read_bw --server --listen 127.0.0.85", "mroce bench read_bw --to 127.0.0.85 --size 1048576 -n 2000"},
	"bench write_lat":      {"mroce bench write_lat --server --listen 127.0.0.85", "mroce bench write_lat 127.0.0.85 -n 10000"},
	"sim loss":             {"mroce sim loss --plot loss.svg", "mroce sim loss --losses 0.05 --size-mib 8 --trace loss.trace", "mroce sim loss --losses 0,0.1,0.2 --every-link --paths 128 --seeds 4 --jobs 2 --resend same"},
	"sim incast":           {"mroce sim incast --senders 8,32 --rates-gbps 400"},
	"sim planes":           {"mroce sim planes --planes 4,8 --hosts-per-leaf 8 --spines 4"},
	"sim planefail":        {"mroce sim planefail --down --plot planefail.svg"},
	"sim flows":            {"mroce sim flows testdata/traffic/fattree-incast-8.txt --seeds 3"},
	"sim allreduce":        {"mroce sim allreduce --hosts 64 --plot allreduce.svg"},
	"sim alltoall":         {"mroce sim alltoall --hosts 16"},
	"sim permutation":      {"mroce sim permutation --fat-tree-k 8 --paths 8,128 --bounds"},
	"bench-net":            {"mroce bench-net --size-mib 512"},
	"netem up":             {"mroce netem up --name lab --hosts 2 --planes 4 --loss 0.01 --burst-len 4"},
	"netem relay":          {"mroce netem relay --source-port-base 4798 --loss 0.02 --reorder 0.01 --plane-delay 1=100us"},
	"netem exec":           {"mroce netem exec --name lab 0 -- mroce send --to 10.0.0.2,10.1.0.2"},
	"netem status":         {"mroce netem status"},
	"netem down":           {"mroce netem down --name lab --stop"},
	"conformance endpoint": {"ROLE=responder TESTCASE=transfer PLANES=127.0.0.1 PORT=4797 SIZE=16777216 LOGDIR=/tmp/logs mroce conformance endpoint"},
	"conformance run":      {"mroce conformance run --cases transfer,loss-1 --json", "mroce conformance run --impl vendor=/path/to/vendor-wrapper --html matrix.html"},
	"conformance probe":    {"mroce conformance probe --target 192.0.2.10:4797 --rkey 0x1234 --len 1048576 --name \"vendor NIC\""},
	"conformance sender":   {"mroce conformance sender --requester /path/to/vendor-wrapper --json"},
	"conformance self":     {"mroce conformance self --auth"},
	"version":              {"mroce version"},
	"decode":               {"mroce decode --pcap transfer.pcap --key-log keys.log", "mroce decode --pcap testdata/apps/send.pcap --apps"},
	"keygen":               {"mroce keygen --out recv.key", "mroce keygen --psk --out shared.psk"},
	"completion":           {"mroce completion bash > /etc/bash_completion.d/mroce"},
	"trace":                {"mroce trace demo.trace", "mroce trace demo.trace --plot demo-trace.svg"},
}

// addExamples appends each command's examples to its --help.
func addExamples(path string, cmds []*cli.Command) {
	for _, c := range cmds {
		name := strings.TrimSpace(path + " " + c.Name)
		if ex := examples[name]; len(ex) > 0 {
			if c.Description != "" {
				c.Description += "\n\n"
			}
			c.Description += "Examples:\n   " + strings.Join(ex, "\n   ")
		}
		addExamples(name, c.Subcommands)
	}
}
