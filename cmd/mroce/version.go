package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/proto"
)

const modulePath = "github.com/mroce/mroce"

// versionCommand defines mroce version.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print the versions of mroce, Go and the wire format",
		ArgsUsage: " ",
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef(c, "version takes no arguments")
			}
			printVersion(c.App.Writer)
			return nil
		},
	}
}

// printVersion prints what mroce version and mroce --version print.
func printVersion(w io.Writer) {
	module, version, vcs := modulePath, "(devel)", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Path != "" {
			module = info.Main.Path
		}
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		vcs = vcsInfo(info)
	}
	fmt.Fprintf(w, "%s %s\n", progName, version)
	fmt.Fprintf(w, "module: %s\n", module)
	if vcs != "" {
		fmt.Fprintf(w, "commit: %s\n", vcs)
	}
	fmt.Fprintf(w, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "wire format version: %d\n", proto.Version)
}

// vcsInfo returns the revision the binary was built from, with its time and
// whether the tree was modified, or "" when the build recorded none.
func vcsInfo(info *debug.BuildInfo) string {
	var rev, when, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return ""
	}
	if when != "" {
		rev += " " + when
	}
	if modified == "true" {
		rev += " (modified)"
	}
	return rev
}
