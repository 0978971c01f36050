package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBadInput is the command's part of the bad-input pass (docs/reliability.md
// R17(d), R38, R47): hostile identifiers and arguments (oversized, empty,
// control characters, terminal escapes, SQL, duplicate or case-variant
// JSON keys) get a refusal exit code and one short line on stderr that
// does not echo them whole, and change nothing in the database.
// TestRefusals covers the ordinary refusals with golden output.
func TestBadInput(t *testing.T) {
	f := buildFixture(t)
	now := cliNow()
	huge := strings.Repeat("x", 1<<20)
	approve := func(extra ...string) []string {
		return append([]string{"approve", f.refundID}, extra...)
	}
	cases := []struct {
		name  string
		args  []string
		codes []int // acceptable exit codes
	}{
		{"state 1 MiB thread", []string{"state", huge}, []int{exitUsage, exitNotFound}},
		{"state thread with NUL", []string{"state", "refund\x00-7"}, []int{exitUsage, exitNotFound}},
		{"state thread with escape", []string{"state", "refund-7\x1b[2J"}, []int{exitUsage, exitNotFound}},
		{"state thread with SQL", []string{"state", "x' OR '1'='1"}, []int{exitNotFound}},
		{"state 1 MiB checkpoint", []string{"state", threadRefund, "--checkpoint", huge}, []int{exitUsage, exitNotFound}},
		{"history 1 MiB thread", []string{"history", huge}, []int{exitUsage, exitNotFound}},
		{"history bad before", []string{"history", threadDone, "--before", "\x1b[31m"}, []int{exitUsage, exitNotFound}},
		{"approvals 1 MiB thread", []string{"approvals", "--thread", huge}, []int{exitUsage}},
		{"approvals 1 MiB tool", []string{"approvals", "--tool", huge}, []int{exitUsage}},
		{"approvals 1 MiB cursor", []string{"approvals", "--cursor", huge}, []int{exitUsage}},
		{"approve empty ID", []string{"approve", "", "--reviewer", "alice"}, []int{exitUsage}},
		{"reject empty ID", []string{"reject", "", "--reviewer", "alice"}, []int{exitUsage}},
		{"state empty thread", []string{"state", ""}, []int{exitUsage}},
		{"empty --db", []string{"--db", "", "threads"}, []int{exitUsage}},
		{"approve 1 MiB ID", []string{"approve", huge, "--reviewer", "alice"}, []int{exitUsage, exitNotFound}},
		{"approve ID with escape", []string{"approve", f.refundID + "\x1b[2J", "--reviewer", "alice"}, []int{exitUsage, exitNotFound}},
		{"reviewer 1 MiB", approve("--reviewer", huge), []int{exitUsage, exitRefused}},
		{"reviewer with escape", approve("--reviewer", "alice\x1b[31m"), []int{exitUsage, exitRefused}},
		{"reviewer with newline", approve("--reviewer", "alice\nbob"), []int{exitUsage, exitRefused}},
		{"reviewer invalid UTF-8", approve("--reviewer", "ali\xffce"), []int{exitUsage, exitRefused}},
		{"note over the cap", approve("--reviewer", "alice", "--note", huge), []int{exitUsage, exitRefused}},
		{"args duplicate key", approve("--reviewer", "alice", "--args", `{"order":"A-7","order":"A-8","amount":30}`), []int{exitUsage, exitRefused}},
		{"args case-variant key", approve("--reviewer", "alice", "--args", `{"Order":"A-7","amount":30}`), []int{exitUsage, exitRefused}},
		{"args case-variant duplicate", approve("--reviewer", "alice", "--args", `{"order":"A-7","ORDER":"A-8","amount":30}`), []int{exitUsage, exitRefused}},
		{"args 1 MiB", approve("--reviewer", "alice", "--args", `{"order":"`+huge+`","amount":30}`), []int{exitUsage, exitRefused}},
		{"args deep nesting", approve("--reviewer", "alice", "--args", strings.Repeat("[", 10001)+strings.Repeat("]", 10001)), []int{exitUsage, exitRefused}},
		{"args invalid UTF-8", approve("--reviewer", "alice", "--args", "{\"order\":\"A-\xff\",\"amount\":30}"), []int{exitUsage, exitRefused}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := f.copyDB(t)
			before := dump(t, db)
			for _, json := range []bool{false, true} {
				args := tc.args
				if json {
					args = append([]string{"--json"}, args...)
				}
				got := cli(db, now, args...)
				if !containsInt(tc.codes, got.code) {
					t.Errorf("json=%v: exit %d, want one of %v: %s", json, got.code, tc.codes, short(got.stderr))
				}
				if lines := strings.Count(got.stderr, "\n"); lines != 1 || !strings.HasPrefix(got.stderr, "lockstep: ") {
					t.Errorf("json=%v: stderr is not one lockstep line: %s", json, short(got.stderr))
				}
				if len(got.stderr) > 4096 || len(got.stdout) > 8192 {
					t.Errorf("json=%v: %d bytes on stderr, %d on stdout: hostile input must not be echoed whole", json, len(got.stderr), len(got.stdout))
				}
				if strings.ContainsAny(got.stderr, "\x1b\x00") || strings.ContainsAny(got.stdout, "\x1b\x00") {
					t.Errorf("json=%v: output carries a raw escape or NUL: %q", json, short(got.stderr))
				}
				if json {
					checkOneJSON(t, got.stdout)
				}
			}
			if diff := cmp.Diff(before, dump(t, db)); diff != "" {
				t.Errorf("a refused command changed the database (-before +after):\n%s", diff)
			}
		})
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func short(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
