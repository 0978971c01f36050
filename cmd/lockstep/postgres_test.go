package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/postgres"
)

// TestPostgresDatabase: every command takes a PostgreSQL URL for --db
// (the schema from LOCKSTEP_POSTGRES_SCHEMA): threads, state, approvals,
// history and graph read a thread waiting on an approval, approve records
// the decision in the database's approval store, and no output names the
// URL's password. A URL of a server that does not answer, and a schema
// that holds no lockstep tables, are failures that change nothing.
func TestPostgresDatabase(t *testing.T) {
	base := os.Getenv("LOCKSTEP_POSTGRES_URL")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LOCKSTEP_POSTGRES_URL is not set and CI=true")
		}
		t.Skip("LOCKSTEP_POSTGRES_URL not set: the Postgres tests skip (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "pw-never-printed"
	u.User = url.UserPassword(u.User.Username(), secret) // the test cluster trusts loopback: the password is never checked
	dbURL := u.String()
	var r [6]byte
	_, _ = rand.Read(r[:])
	schema := "cli_" + hex.EncodeToString(r[:])
	ctx := context.Background()
	db, err := postgres.Open(ctx, dbURL, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
		db.Close()
	})
	g := newGraphEnv(db.Saver())
	g.at(10 * time.Minute)
	refund, err := gatedGraph(g.clock, refundTTL).Compile(g.options()...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := refund.Invoke(ctx, threadRefund, graph.Set(Call{Tool: "refund", Args: map[string]any{"order": "A-7", "amount": 40},
		Owner: "payments", Rationale: "the parcel was lost in transit"}, "Tool", "Args", "Owner", "Rationale"))
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("invoke: %v, %s", err, res.Status)
	}
	id := res.Interrupts[0].ID

	t.Setenv("LOCKSTEP_POSTGRES_SCHEMA", schema)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"threads"}, threadRefund},
		{[]string{"state", threadRefund}, id},
		{[]string{"history", threadRefund}, "input"},
		{[]string{"approvals"}, id},
		{[]string{"graph", threadRefund}, "flowchart"},
		{[]string{"--json", "threads"}, threadRefund},
		{[]string{"approve", id, "--reviewer", "alice", "--note", "lost parcels are refunded"}, "approved"},
	} {
		got := cli(dbURL, cliNow(), tc.args...)
		if got.code != exitOK || !strings.Contains(got.stdout, tc.want) {
			t.Errorf("lockstep --db URL %v: exit %d, stdout %q, stderr %q; want exit 0 with %q", tc.args, got.code, got.stdout, got.stderr, tc.want)
		}
		if strings.Contains(got.stdout+got.stderr, secret) {
			t.Errorf("lockstep --db URL %v printed the URL's password", tc.args)
		}
	}
	rec, err := db.Approvals().Get(ctx, id)
	if err != nil || rec.Decision.Outcome != approval.Approved || rec.Decision.Reviewer != "alice" {
		t.Errorf("the database's decision on %s = %+v, %v; want approved by alice", id, rec.Decision, err)
	}

	down := *u
	down.Host = "127.0.0.1:1"
	for _, tc := range []struct {
		name, db, schema, kind string
	}{
		{"a server that does not answer", down.String(), schema, kindInternal},
		{"a schema without lockstep tables", dbURL, "not_" + schema, kindNoDatabase},
	} {
		t.Setenv("LOCKSTEP_POSTGRES_SCHEMA", tc.schema)
		got := cli(tc.db, cliNow(), "--json", "threads")
		if got.code == exitOK || !strings.Contains(got.stdout+got.stderr, `"`+tc.kind+`"`) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want a failure of kind %s", tc.name, got.code, got.stdout, got.stderr, tc.kind)
		}
		if strings.Contains(got.stdout+got.stderr, secret) {
			t.Errorf("%s: the failure printed the URL's password", tc.name)
		}
	}
	var n int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, "not_"+schema).Scan(&n); err != nil || n != 0 {
		t.Errorf("the CLI created schema not_%s (%d, %v)", schema, n, err)
	}
}
