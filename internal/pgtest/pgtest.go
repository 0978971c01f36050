// Package pgtest is what lockstep's tests on PostgreSQL share: the test
// database's URL, with the rule for running without one, names for
// schemas of their own, and throwaway clusters of a test's own (to stop
// or restart under load). It is test support: only tests import it. It
// imports no package of lockstep, so that package postgres's own tests
// can use it too; pgtest/pgschema creates the schemas, through package
// postgres.
package pgtest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// EnvURL names the environment variable that holds the test database's
// URL; .ci/run starts a throwaway cluster and sets it.
const EnvURL = "LOCKSTEP_POSTGRES_URL"

// URL returns the URL of the test database (EnvURL). Without one the test
// is skipped, with one line saying how to run it, except under CI=true,
// where a missing database fails the test.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(EnvURL + " is not set and CI=true: .ci/run starts a cluster and sets it")
		}
		t.Skip(EnvURL + " not set: the Postgres tests skip (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
	}
	return url
}

// SchemaName returns a schema name no other test uses: prefix and 12
// random hex digits.
func SchemaName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// OwnCluster starts a throwaway cluster of the test's own with the
// module's .ci/postgres.sh, on a free loopback port in a new directory
// under /tmp (the postgres user must reach it), so that stopping or
// restarting it disturbs no other test, and stops it when the test ends.
// It returns the cluster's URL and a function that runs a postgres.sh
// command on it ("restart", "down", "up"), failing the test when that
// fails. It skips the test as URL does (a test on a cluster of its own
// runs where the other Postgres tests do), and when PostgreSQL's binaries
// (initdb, pg_ctl) are not installed, except under CI=true, where that
// fails it.
func OwnCluster(t testing.TB) (url string, ctl func(cmd string)) {
	t.Helper()
	URL(t)
	script := clusterScript(t)
	if _, err := exec.LookPath("initdb"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
			if os.Getenv("CI") == "true" {
				t.Fatal("no initdb: .ci/run installs PostgreSQL")
			}
			t.Skip("PostgreSQL's binaries (initdb, pg_ctl) are not installed: this test starts a cluster of its own")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "lockstep-pg-own-")
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) string {
		t.Helper()
		c := exec.Command(script, cmd, dir)
		c.Env = append(os.Environ(), "PGPORT="+strconv.Itoa(port), "PGBOUNCER=0")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("postgres.sh %s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	out := run("start")
	t.Cleanup(func() { run("stop") })
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "export "+EnvURL+"='"); ok {
			url = strings.TrimSuffix(v, "'")
		}
	}
	if url == "" {
		t.Fatalf("postgres.sh start printed no URL:\n%s", out)
	}
	return url, func(cmd string) { run(cmd) }
}

// clusterScript returns the path of .ci/postgres.sh, found from the
// working directory (the test's package) upwards.
func clusterScript(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, ".ci", "postgres.sh")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no .ci/postgres.sh above the working directory: run the test inside the module")
		}
		dir = parent
	}
}
