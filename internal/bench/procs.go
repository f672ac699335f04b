package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"
)

// buildBinaries builds cmd/api and cmd/dispatcher into dir.
func buildBinaries(ctx context.Context, root, dir string) (api, dispatcher string, err error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator), "./cmd/api", "./cmd/dispatcher")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return filepath.Join(dir, "api"), filepath.Join(dir, "dispatcher"), nil
}

// proc is one running api or dispatcher process; its output goes to a log
// file and is scanned for the lines that say it is ready.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error

	mu      sync.Mutex
	matches map[*regexp.Regexp][]string
	seen    chan struct{} // signalled after every line
}

var (
	apiListeningRE    = regexp.MustCompile(`api listening on (http://\S+)`)
	apiMetricsRE      = regexp.MustCompile(`api metrics on (http://\S+)`)
	dispatcherMetrics = regexp.MustCompile(`dispatcher metrics on (http://\S+)/metrics`)
	dispatcherStarted = regexp.MustCompile(`msg=dispatcher_started`)
)

// startProc runs binary with env (added to a minimal environment), logging
// to logPath, and returns once every regexp in ready has matched a line of
// its output.
func startProc(ctx context.Context, name, binary, logPath string, env map[string]string, ready ...*regexp.Regexp) (*proc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(binary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{}), matches: map[*regexp.Regexp][]string{}, seen: make(chan struct{}, 1)}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = io.WriteString(logFile, line+"\n")
			p.mu.Lock()
			for _, re := range ready {
				if _, ok := p.matches[re]; !ok {
					if m := re.FindStringSubmatch(line); m != nil {
						p.matches[re] = m
					}
				}
			}
			p.mu.Unlock()
			select {
			case p.seen <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		_ = pw.Close()
		logFile.Close()
		close(p.done)
	}()

	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for !p.ready(ready) {
		select {
		case <-p.seen:
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it was ready: %v\n%s", name, p.err, tail(logPath, 30))
		case <-deadline.C:
			p.kill()
			return nil, fmt.Errorf("%s not ready after 60s:\n%s", name, tail(logPath, 30))
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		}
	}
	return p, nil
}

func (p *proc) ready(res []*regexp.Regexp) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, re := range res {
		if _, ok := p.matches[re]; !ok {
			return false
		}
	}
	return true
}

// match returns the submatches of re's first matching line.
func (p *proc) match(re *regexp.Regexp) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.matches[re]
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits up to timeout for the process to exit, then
// kills it.
func (p *proc) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not stop within %s", p.name, timeout)
	}
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
