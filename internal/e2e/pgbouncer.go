package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer is a private PgBouncer (Debian's pgbouncer package) in front of
// one database of a private cluster, in transaction mode: each
// transaction runs on whichever of its few server connections is free.
type PgBouncer struct {
	*Proc
	port int
	db   string
}

// StartPgBouncer starts PgBouncer on a free port of 127.0.0.1 in front of
// database db of pg, pool_mode = transaction with poolSize server
// connections, trust authentication for the postgres role (whose admin
// console SHOW POOLS reads), and stops it when the test ends. As root it
// runs as the postgres user (PgBouncer refuses root). It fails the test
// when pgbouncer is not installed (deploy/test-deps.sh installs it).
func StartPgBouncer(t testing.TB, pg *Cluster, db string, poolSize int) *PgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin = "/usr/sbin/pgbouncer"; !fileExists(bin) {
			t.Fatalf("e2e: pgbouncer is not installed: run deploy/test-deps.sh or apt-get install pgbouncer")
		}
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("e2e: pgbouncer refuses root and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parent is closed to the postgres user.
	dir, err := os.MkdirTemp("", "hookd-pgbouncer-")
	if err != nil {
		t.Fatalf("e2e: pgbouncer dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatalf("e2e: pgbouncer %s: %v", name, err)
		}
		return p
	}
	users := write("userlist.txt", `"postgres" ""`+"\n")
	if cred != nil {
		for _, p := range []string{dir, users} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("e2e: pgbouncer dir: %v", err)
			}
		}
	}
	// A free port can be taken between the probe and the bind: try a few.
	for try := 0; ; try++ {
		port := freePort(t)
		conf := write("pgbouncer.ini", fmt.Sprintf(`[databases]
%[1]s = host=127.0.0.1 port=%[2]d dbname=%[1]s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[3]d
unix_socket_dir =
auth_type = trust
auth_file = %[4]s
admin_users = postgres
pool_mode = transaction
default_pool_size = %[5]d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
`, db, pg.Port(), port, users, poolSize))
		cmd := exec.Command(bin, conf)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/bin", "LC_ALL=C"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
		p := startCmd(t, "pgbouncer", cmd)
		b := &PgBouncer{Proc: p, port: port, db: db}
		if b.waitUp(t) {
			return b
		}
		if try == 2 || !strings.Contains(p.Output(), "in use") {
			t.Fatalf("e2e: pgbouncer did not start:\n%s", p.Output())
		}
	}
}

// waitUp reports whether the pooler answers a query within 20 s, false
// when it exited first.
func (b *PgBouncer) waitUp(t testing.TB) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b.Exited() {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, b.URL()+"&default_query_exec_mode=simple_protocol")
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("e2e: pgbouncer not answering after 20s:\n%s", b.Output())
	return false
}

// URL is the pooled database's URL, as postgres.
func (b *PgBouncer) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, b.db)
}

// Pool is one line of the admin console's SHOW POOLS: the clients and the
// server connections of the pooled database.
type Pool struct {
	ClientsActive, ClientsWaiting int
	ServersActive, ServersIdle    int
	ServersUsed, ServersLogin     int
	Mode                          string
}

// Servers is every server connection the pool holds.
func (p Pool) Servers() int { return p.ServersActive + p.ServersIdle + p.ServersUsed + p.ServersLogin }

// Pool reads the pooled database's line of SHOW POOLS.
func (b *PgBouncer) Pool(t testing.TB) Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", b.port))
	if err != nil {
		t.Fatalf("e2e: pgbouncer admin console: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW POOLS")
	if err != nil {
		t.Fatalf("e2e: SHOW POOLS: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatalf("e2e: SHOW POOLS: %v", err)
		}
		col := map[string]string{}
		for i, f := range rows.FieldDescriptions() {
			col[f.Name] = fmt.Sprint(vals[i])
		}
		if col["database"] != b.db {
			continue
		}
		n := func(name string) int { v, _ := strconv.Atoi(col[name]); return v }
		return Pool{ClientsActive: n("cl_active"), ClientsWaiting: n("cl_waiting"), ServersActive: n("sv_active"), ServersIdle: n("sv_idle"),
			ServersUsed: n("sv_used"), ServersLogin: n("sv_login"), Mode: col["pool_mode"]}
	}
	t.Fatalf("e2e: SHOW POOLS has no line for %s", b.db)
	return Pool{}
}

// startCmd starts cmd as a Proc whose output is captured, killed when the
// test ends.
func startCmd(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("e2e: start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- %s output (last 60 lines) ---\n%s", name, p.Tail(60))
		}
	})
	return p
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("e2e: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
