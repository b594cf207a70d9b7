//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a program running in one of the testbed's namespaces, through ip
// netns exec, which execs it in place: the process kbench waits for is the
// program, and its resource usage is the program's.
type proc struct {
	label string
	cmd   *exec.Cmd
	mu    sync.Mutex
	out   bytes.Buffer // standard output
	errb  bytes.Buffer // standard error
	ready chan struct{}
	done  chan struct{} // closed once waited for
	err   error
	ended time.Time
}

// procs holds every program kbench started that has not been waited for,
// so that an error or a signal can stop them all before the namespaces go.
type procs struct {
	mu   sync.Mutex
	live map[*proc]bool
}

// start runs argv in namespace ns. When readyPrefix is not empty it waits,
// up to 10 s, for a line of standard output that begins with it.
func (ps *procs) start(ctx context.Context, ns, label, readyPrefix string, argv ...string) (*proc, error) {
	p := &proc{label: label, ready: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	// A kbench that is killed outright takes its programs with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.errb}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	ps.mu.Lock()
	if ps.live == nil {
		ps.live = map[*proc]bool{}
	}
	ps.live[p] = true
	ps.mu.Unlock()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		r := bufio.NewReader(stdout)
		signalled := readyPrefix == ""
		if signalled {
			close(p.ready)
		}
		for {
			line, err := r.ReadString('\n')
			p.mu.Lock()
			p.out.WriteString(line)
			p.mu.Unlock()
			if !signalled && strings.HasPrefix(line, readyPrefix) {
				signalled = true
				close(p.ready)
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		<-copied
		err := p.cmd.Wait()
		p.mu.Lock()
		p.err, p.ended = err, time.Now()
		p.mu.Unlock()
		ps.mu.Lock()
		delete(ps.live, p)
		ps.mu.Unlock()
		close(p.done)
	}()
	if readyPrefix == "" {
		return p, nil
	}
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		return p, fmt.Errorf("%s ended before it was ready: %v: %s", label, p.err, p.stderr())
	case <-time.After(10 * time.Second):
		ps.stop(p)
		return p, fmt.Errorf("%s was not ready in 10 s: %s", label, p.stderr())
	case <-ctx.Done():
		ps.stop(p)
		return p, ctx.Err()
	}
}

// wait waits for p to end by itself, for at most limit; past it, or when
// ctx ends, it stops p. It reports whether p ended by itself.
func (ps *procs) wait(ctx context.Context, p *proc, limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	ps.stop(p)
	return false
}

// stop asks p to end with SIGTERM, which mroce and the TCP helper answer by
// closing their connections with a reason, and kills it after 5 s.
func (ps *procs) stop(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stopAll stops every program still running.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	var all []*proc
	for p := range ps.live {
		all = append(all, p)
	}
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { ps.stop(p) })
	}
	wg.Wait()
}

// cpu is the user and system time p used, valid once it ended.
func (p *proc) cpu() time.Duration {
	<-p.done
	if p.cmd.ProcessState == nil {
		return 0
	}
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

func (p *proc) stdout() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.out.Bytes())
}

// stderr is the last few lines p wrote to standard error, for messages.
func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(p.errb.String()), "\n")
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	return strings.Join(lines, " / ")
}

// failure describes how p ended, or is nil when it exited with status 0.
func (p *proc) failure() error {
	<-p.done
	if p.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return fmt.Errorf("%s: %v: %s", p.label, ee.ProcessState, p.stderr())
	}
	return fmt.Errorf("%s: %v", p.label, p.err)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
