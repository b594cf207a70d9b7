package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwarded are the signals netem exec passes on to its program.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runInNamespace runs argv in network namespace ns and returns its exit
// status, 128+N for a program killed by signal N. ip netns exec enters the
// namespace and execs argv in place, so the process started is the
// program's. The signals this process gets are passed on to it, and it is
// killed should this process die of one it cannot catch.
func runInNamespace(ns string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// The kernel sends Pdeathsig when the thread that started the program
	// ends, so that thread runs nothing else until the program has ended.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var watched []os.Signal
	for _, s := range forwarded {
		if !signal.Ignored(s) { // as nohup's SIGHUP: the program ignores it too
			watched = append(watched, s)
		}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, watched...)
	defer signal.Stop(sigs)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done, forwarding := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(forwarding)
		for {
			select {
			case s := <-sigs:
				if !fromTerminal(s) {
					cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-forwarding
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case !errors.As(err, &exit):
		return 0, err
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return exit.ExitCode(), nil
}

// fromTerminal says whether s is a signal the terminal sent, Ctrl-C's
// SIGINT or Ctrl-\'s SIGQUIT. A terminal sends them to its foreground
// process group. When that is this process's group it is the program's
// too, which has the signal already and must not get it twice.
func fromTerminal(s os.Signal) bool {
	if s != syscall.SIGINT && s != syscall.SIGQUIT {
		return false
	}
	tty, err := os.Open("/dev/tty") // the controlling terminal, if there is one
	if err != nil {
		return false
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}
