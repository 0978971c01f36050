package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/postgres"
)

// TestMain runs a worker process when the demo re-executes the test
// binary as one, the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	goleak.VerifyTestMain(m)
}

// TestFleetDemo runs the demo on the test database (LOCKSTEP_POSTGRES_URL;
// skipped without it, failed under CI=true), in a schema of its own, with
// the lockstep CLI built from this module: three worker processes, twelve
// bookings, four approved with the CLI, one worker killed. It exits 0 and
// says every booking happened exactly once, each with its reservation.
func TestFleetDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes and builds the CLI")
	}
	url := os.Getenv("LOCKSTEP_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LOCKSTEP_POSTGRES_URL is not set and CI=true: .ci/run starts a cluster and sets it")
		}
		t.Skip("LOCKSTEP_POSTGRES_URL not set: the fleet demo skips (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
	}
	cli := filepath.Join(t.TempDir(), "lockstep")
	if b, err := exec.Command("go", "build", "-o", cli, "github.com/lockstepgo/lockstep/cmd/lockstep").CombinedOutput(); err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, b)
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	schema := "fleet_" + hex.EncodeToString(r[:])
	t.Setenv("LOCKSTEP_POSTGRES_SCHEMA", schema)
	t.Cleanup(func() {
		db, err := postgres.Open(context.Background(), url, postgres.Config{Schema: schema, MaxConns: 1})
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer db.Close()
		if _, err := db.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"--db", url, "--lockstep", cli, "--workers", "3", "--bookings", "12"}, &out, &errOut)
	t.Logf("the demo's output:\n%s", out.String())
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut.String())
	}
	for _, want := range []string{"killed worker-", "approved ", "every booking happened exactly once: 12 bookings, 12 reservations at the hotel, none twice; 4 approved with lockstep approve"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output says nothing of %q", want)
		}
	}
	if n := strings.Count(out.String(), " HB-"); n != 12 {
		t.Errorf("%d bookings listed with a reservation, want 12", n)
	}
}

// TestFleetFlags: a --db that is not a Postgres URL, fewer than two
// workers, and stray arguments are usage errors (exit 2), and nothing runs.
func TestFleetFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--db", "fleet.db"},
		{"--db", "postgres://localhost/x", "--workers", "1"},
		{"--db", "postgres://localhost/x", "--bookings", "0"},
		{"--db", "postgres://localhost/x", "extra"},
	} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, &out, &errOut); code != 2 || out.Len() != 0 {
			t.Errorf("run(%q) = exit %d, stdout %q; want exit 2, nothing run", args, code, out.String())
		}
	}
}
