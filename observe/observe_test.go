package observe

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidTraceParent(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
	} {
		if got := ValidTraceParent(tc.s); got != tc.want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestLinks(t *testing.T) {
	ctx := context.Background()
	if Links(ctx) != nil || WithLinks(ctx, "", "") != ctx {
		t.Fatal("links from nothing")
	}
	a := WithLinks(ctx, "x", "")
	b := WithLinks(a, "y")
	if diff := cmp.Diff([]string{"x", "y"}, Links(b)); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	Links(b)[0] = "changed"
	if diff := cmp.Diff([]string{"x"}, Links(a)); diff != "" {
		t.Errorf("the parent's links changed (-want +got):\n%s", diff)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindRun: "run", KindApprovalResume: "approval_resume", KindLeaseConflict: "lease_conflict", 99: "kind(99)"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", k, k.String(), want)
		}
	}
}
