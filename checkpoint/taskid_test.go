package checkpoint_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// refTaskID is TaskID as first written, with a streaming digest: saved
// writes find their task by this ID, so the bytes hashed must never change.
func refTaskID(thread, checkpointID, ns string, step int, node, path string, triggers []string) string {
	h := sha256.New()
	for _, s := range append([]string{thread, checkpointID, ns, strconv.Itoa(step), node, path}, triggers...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	x := hex.EncodeToString(b[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

func TestTaskIDStable(t *testing.T) {
	long := strings.Repeat("x", 300)
	cases := []struct {
		thread, id, ns string
		step           int
		node, path     string
		triggers       []string
	}{
		{"t", "", "", -1, "__start__", "pull", nil},
		{"w1-0", "019a0000-0000-7000-8000-000000000000", "", 3, "n3", "pull", []string{"branch:to:n3"}},
		{"t", "c", "sub:1", 12, "a", "push:2", []string{"x", "y"}},
		{long, long, long, 1 << 40, long, "pull", []string{long, ""}}, // past the stack buffer
	}
	for _, c := range cases {
		got := checkpoint.TaskID(c.thread, c.id, c.ns, c.step, c.node, c.path, c.triggers)
		want := refTaskID(c.thread, c.id, c.ns, c.step, c.node, c.path, c.triggers)
		if got != want {
			t.Errorf("TaskID(%q, %q, %q, %d, %q, %q, %q) = %s, want %s", c.thread, c.id, c.ns, c.step, c.node, c.path, c.triggers, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		checkpoint.TaskID("w1-0", "019a0000-0000-7000-8000-000000000000", "", 3, "n3", "pull", []string{"branch:to:n3"})
	}); n > 1 {
		t.Errorf("TaskID allocates %v times, want 1 (the string)", n)
	}
}
