package checkpoint_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Namespaces are LangGraph's checkpoint_ns: "<node>:<task ID>", nested
// with "|" (libs/langgraph/langgraph/pregel/_algo.py, prepare_single_task),
// and NSPath is its recast_checkpoint_ns.
func TestNamespaces(t *testing.T) {
	tests := []struct {
		name         string
		ns           string
		parent, path string
		levels       []checkpoint.NSLevel
	}{
		{"root", "", "", "", nil},
		{"one level", "agent:t1", "", "agent", []checkpoint.NSLevel{{"agent", "t1"}}},
		{"two levels", "agent:t1|tools:t2", "agent:t1", "agent|tools", []checkpoint.NSLevel{{"agent", "t1"}, {"tools", "t2"}}},
		{"three levels", "a:1|b:2|c:3", "a:1|b:2", "a|b|c", []checkpoint.NSLevel{{"a", "1"}, {"b", "2"}, {"c", "3"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkpoint.ParentNS(tc.ns); got != tc.parent {
				t.Errorf("ParentNS(%q) = %q, want %q", tc.ns, got, tc.parent)
			}
			if got := checkpoint.NSPath(tc.ns); got != tc.path {
				t.Errorf("NSPath(%q) = %q, want %q", tc.ns, got, tc.path)
			}
			levels, err := checkpoint.SplitNS(tc.ns)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.levels, levels); diff != "" {
				t.Errorf("SplitNS(%q) (-want +got):\n%s", tc.ns, diff)
			}
			// TaskNS builds the namespace back level by level.
			ns := ""
			for _, l := range levels {
				ns = checkpoint.TaskNS(ns, l.Node, l.TaskID)
			}
			if ns != tc.ns {
				t.Errorf("TaskNS over the levels of %q = %q", tc.ns, ns)
			}
		})
	}
	for _, bad := range []string{"agent", ":t1", "agent:", "a:1||b:2", "a:1|"} {
		if _, err := checkpoint.SplitNS(bad); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Errorf("SplitNS(%q): error = %v, want ErrInvalid", bad, err)
		}
	}
	nested := []struct {
		ns, parent string
		want       bool
	}{
		{"a:1", "", true}, {"a:1|b:2", "", true}, {"", "", false},
		{"a:1|b:2", "a:1", true}, {"a:1", "a:1", false}, {"a:10|b:2", "a:1", false}, {"a:1b:2", "a:1", false},
	}
	for _, tc := range nested {
		if got := checkpoint.NestedIn(tc.ns, tc.parent); got != tc.want {
			t.Errorf("NestedIn(%q, %q) = %v, want %v", tc.ns, tc.parent, got, tc.want)
		}
	}
}
