package crashtest

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// Hook counts the hits of every crash point and kills the process at the
// hit its plan names. Pass Hit to testhook.With (for the graph runs'
// context) and sqlite.Config.Hook, and call it from the scenario's own
// points. A Hook is safe for
// concurrent use.
type Hook struct {
	plan Plan
	rep  *Reporter
	kill func()

	mu     sync.Mutex
	hits   map[Point]int
	killed bool
}

// NewHook returns a hook that follows plan (its delay is the parent's
// business and ignored here), reports the kill on rep (nil: no report) and
// kills with kill (nil: SIGKILL the process, see Kill).
func NewHook(plan Plan, rep *Reporter, kill func()) *Hook {
	if kill == nil {
		kill = Kill
	}
	return &Hook{plan: plan, rep: rep, kill: kill, hits: map[Point]int{}}
}

// Hit records a hit of point and kills the process when it is the plan's
// hit: "KILL <point> <n>" is reported first.
func (h *Hook) Hit(point string) {
	p := Point(point)
	h.mu.Lock()
	h.hits[p]++
	n := h.hits[p]
	die := !h.killed && h.plan.Point == p && h.plan.Occurrence == n
	if die {
		h.killed = true
	}
	h.mu.Unlock()
	if !die {
		return
	}
	if h.rep != nil {
		h.rep.Kill(p, n)
	}
	h.kill()
}

// Hits returns the hit counts so far (a copy).
func (h *Hook) Hits() map[Point]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[Point]int, len(h.hits))
	for p, n := range h.hits {
		out[p] = n
	}
	return out
}

// Kill sends SIGKILL to the process itself and never returns: nothing the
// process would do next (a commit, an acknowledgement, a deferred cleanup)
// happens.
func Kill() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	for {
		time.Sleep(time.Hour) // the signal is on its way
	}
}
