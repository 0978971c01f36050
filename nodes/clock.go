package nodes

import (
	"context"
	"time"
)

// Clock reads time and waits. The executor waits only between attempts
// (backoff) and while polling an in-progress duplicate; tests inject a
// Clock that records the waits instead of sleeping. Per-attempt timeouts
// use the context's deadline (testing/synctest fakes them).
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx is done: then it returns ctx's error at
	// once.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock returns the real clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
