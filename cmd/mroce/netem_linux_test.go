package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mroce/mroce/tunnet"
)

// started is a program the test runs, with the first line it printed.
type started struct {
	cmd    *exec.Cmd
	first  string
	rest   bytes.Buffer  // what it printed after, once read
	closed chan struct{} // closed when its output ends
}

// startLine starts bin with args in a session of its own, without a
// terminal, and waits for the first line it prints.
func startLine(t *testing.T, bin string, args ...string) *started {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: exec.Command(bin, args...), closed: make(chan struct{})}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	s.cmd.Stdout, s.cmd.Stderr = w, os.Stderr
	err = s.cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait(); r.Close() })
	line := make(chan string, 1)
	go func() {
		defer close(s.closed)
		out := bufio.NewReader(r)
		l, _ := out.ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(&s.rest, out)
	}()
	select {
	case s.first = <-line:
	case <-time.After(10 * time.Second):
		t.Fatalf("%v printed nothing", args)
	}
	return s
}

// wait waits up to limit for the program, and returns its exit status.
func (s *started) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%v still runs after %v", s.cmd.Args, limit)
	}
	return s.cmd.ProcessState.ExitCode()
}

// output waits up to limit for the end of the program's output, and
// returns what it printed after its first line.
func (s *started) output(t *testing.T, limit time.Duration) string {
	t.Helper()
	select {
	case <-s.closed:
	case <-time.After(limit):
		t.Fatalf("%v: its output did not end in %v", s.cmd.Args, limit)
	}
	return s.rest.String()
}

// netem exec passes SIGTERM and SIGINT on to its program and returns its
// exit status, 128+N for a program killed by signal N, and its program
// dies with it when it is killed.
func TestNetemExecSignals(t *testing.T) {
	needNetAdmin(t)
	name := fmt.Sprintf("s%d", rand.IntN(1e6))
	up := upInProcess(t, name, 1, time.Minute)
	bin := buildBinary(t)
	run := func(script string) *started {
		return startLine(t, bin, "netem", "exec", "--name", name, "0", "--", "sh", "-c", script)
	}
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGTERM, 7}, {syscall.SIGINT, 7}, {syscall.SIGHUP, 7}} {
		if signal.Ignored(c.sig) { // the program would start with it ignored, and sh cannot trap that
			t.Logf("%v: ignored here, so not passed on", c.sig)
			continue
		}
		p := run(fmt.Sprintf(`trap 'kill $s; exit 7' %s; sleep 30 & s=$!; echo ready; wait`, strings.TrimPrefix(unix.SignalName(c.sig), "SIG")))
		at := time.Now()
		p.cmd.Process.Signal(c.sig)
		if code := p.wait(t, time.Second); code != c.want {
			t.Errorf("%v: exit %d, want %d", c.sig, code, c.want)
		}
		t.Logf("%v: the program's status after %v", c.sig, time.Since(at).Round(time.Millisecond))
	}
	// A program that SIGTERM kills: 128+15.
	p := run("echo ready; exec sleep 30")
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Second); code != 128+15 {
		t.Errorf("a program killed by SIGTERM: exit %d", code)
	}
	if r := runCLI(t, "", "netem", "exec", "--name", name, "0", "--", "sh", "-c", "kill -USR1 $$"); r.code != 128+10 {
		t.Errorf("a program killed by SIGUSR1: exit %d, %q", r.code, r.stderr)
	}
	// Killed, netem exec takes its program with it.
	p = run("echo $$; exec sleep 30")
	pid, err := strconv.Atoi(p.first)
	if err != nil {
		t.Fatalf("the program's pid: %q", p.first)
	}
	p.cmd.Process.Kill()
	p.wait(t, time.Second)
	for deadline := time.Now().Add(2 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the program, %d, outlived netem exec", pid)
		}
	}
	select {
	case <-up.done:
		t.Fatalf("up stopped: %+v", up.res)
	default:
	}
}

// alive says whether process pid runs, neither gone nor a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// netem down removes what a netem up that died left, as it recorded it,
// and leaves a mroce-* namespace that it did not make. With --stop it has
// a running netem up tear its network down.
func TestNetemDownOnlyWhatUpMade(t *testing.T) {
	needNetAdmin(t)
	bin := buildBinary(t)
	foreign := fmt.Sprintf("mroce-foreign-%d", rand.IntN(1e6))
	if out, err := exec.Command("ip", "netns", "add", foreign).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", foreign).Run() })
	name := fmt.Sprintf("d%d", rand.IntN(1e6))
	t.Cleanup(func() { tunnet.Remove(name, true) })
	up := startLine(t, bin, "netem", "up", "--name", name, "--hosts", "2", "--planes", "1")
	rec, ok, err := tunnet.ReadRecord(name)
	if !ok || err != nil || !rec.Running() || rec.PID != up.cmd.Process.Pid || len(rec.Present()) != 2 {
		t.Fatalf("up's record: %+v, %v, %v", rec, ok, err)
	}
	up.cmd.Process.Kill() // leaves its namespaces and its record
	up.wait(t, 5*time.Second)
	r := runCLI(t, "", "netem", "status")
	if !strings.Contains(r.stdout, "died, left behind") || !strings.Contains(r.stdout, "mroce-"+name+"-h1") || !strings.Contains(r.stdout, "\n  "+foreign+"\n") {
		t.Errorf("status: %q", r.stdout)
	}
	r = runCLI(t, "", "netem", "down")
	if r.code != 0 || !strings.Contains(r.stdout, "removed network "+name+": mroce-"+name+"-h0 mroce-"+name+"-h1") || !strings.Contains(r.stderr, foreign) {
		t.Errorf("down: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if left, _ := tunnet.List(name); len(left) != 0 {
		t.Errorf("down left %v", left)
	}
	if _, ok, _ := tunnet.ReadRecord(name); ok {
		t.Error("down left the record")
	}
	if _, err := os.Stat("/run/netns/" + foreign); err != nil {
		t.Errorf("down removed a namespace it did not make: %v", err)
	}
	// --stop has a running netem up tear down.
	up = startLine(t, bin, "netem", "up", "--name", name, "--hosts", "1", "--planes", "1")
	if r := runCLI(t, "", "netem", "down", "--name", name, "--stop"); r.code != 0 || !strings.Contains(r.stdout, "removed 0") {
		t.Errorf("down --stop: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if code := up.wait(t, 5*time.Second); code != 0 {
		t.Errorf("up stopped with %d", code)
	}
	if rest := up.output(t, time.Second); !strings.Contains(rest, "every namespace removed") {
		t.Errorf("up: %q", rest)
	}
	if left, _ := tunnet.List(name); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
