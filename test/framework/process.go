package framework

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Process is a child process with its log file.
type Process struct {
	Name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

// Start runs a binary with its output in a log file under dir.
func Start(dir, name, binary string, args ...string) (*Process, error) {
	return StartWithEnv(dir, name, binary, nil, args...)
}

// StartWithEnv is Start with extra environment variables.
func StartWithEnv(dir, name, binary string, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); _ = f.Close() }()
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, then SIGKILL after the grace period.
func (p *Process) Stop(grace time.Duration) { p.Stopped(grace) }

// Kill ends the process at once, as a crash would.
func (p *Process) Kill() {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err
}

// Stopped waits up to grace after SIGTERM and reports whether the process
// stopped by itself (false: it had to be killed).
func (p *Process) Stopped(grace time.Duration) bool {
	if p == nil || p.Exited() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}

// Log returns the process's whole log so far.
func (p *Process) Log() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// LogTail returns the end of the process's log.
func (p *Process) LogTail(n int) string {
	data, _ := os.ReadFile(p.log)
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// FreePorts returns n distinct loopback TCP ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Signal sends sig to the process (nothing when it has ended).
func (p *Process) Signal(sig os.Signal) error {
	if p == nil || p.Exited() {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// WaitExit waits up to timeout for the process to end and reports whether
// it did; it never signals or kills it.
func (p *Process) WaitExit(timeout time.Duration) bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	case <-time.After(timeout):
		return false
	}
}

// ExitCode is the exit status of an ended process (-1 when a signal ended
// it, or while it runs).
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}
