package retry_test

import (
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/retry"
)

// The waits of a policy: 100ms doubling, capped at a second.
func ExamplePolicy_Delay() {
	p := retry.Policy{MaxAttempts: 6, Initial: 100 * time.Millisecond, Max: time.Second}
	for failed := 1; failed < p.Attempts(); failed++ {
		fmt.Println(p.Delay(failed, 0.5))
	}
	// Output:
	// 100ms
	// 200ms
	// 400ms
	// 800ms
	// 1s
}

// A policy is checked where it is configured: a negative wait is refused,
// not replaced.
func ExamplePolicy_Validate() {
	err := retry.Policy{Initial: -time.Second}.Validate()
	fmt.Println(err)
	// Output:
	// retry: invalid policy: Initial -1s: want 0 (no wait) or more
}
