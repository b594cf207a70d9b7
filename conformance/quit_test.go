package conformance

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// An endpoint the runner ends gets SIGQUIT first, which a Go endpoint
// answers with its goroutines' stacks, and is killed only if it is still
// there after the grace.
func TestQuitThenKill(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to stand for an endpoint")
	}
	for _, c := range []struct {
		script string
		grace  time.Duration
		quit   bool // it answers the signal, and exits by its own hand
	}{
		{`trap 'echo quit; exit 3' QUIT; echo ready; while :; do sleep 0.01; done`, time.Minute, true},
		{`trap '' QUIT; echo ready; while :; do sleep 0.01; done`, 100 * time.Millisecond, false},
	} {
		cmd := exec.Command(sh, "-c", c.script)
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewReader(pipe)
		if first, _ := lines.ReadString('\n'); first != "ready\n" { // the trap is set
			t.Fatalf("%q printed %q first", c.script, first)
		}
		var rest []byte
		read := make(chan struct{})
		go func() { rest, _ = io.ReadAll(lines); close(read) }()
		done := make(chan error, 1)
		go func() { <-read; done <- cmd.Wait() }()
		err = quitThenKill(cmd, done, c.grace)
		if quit := strings.Contains(string(rest), "quit"); err == nil || quit != c.quit {
			t.Errorf("%q: %v, printed %q after ready", c.script, err, rest)
		}
	}
}
