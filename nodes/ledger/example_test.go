package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The intent is recorded before the call and the outcome after it; a
// repeat gets the stored outcome; the same key with other arguments is
// refused.
func ExampleNewMemory() {
	ctx := context.Background()
	l, _ := ledger.NewMemory(ledger.Options{})
	in := ledger.Intent{Key: "key-1", Tool: "create_issue", ArgsHash: "h1", Owner: "run-a"}

	_, started, _ := l.Begin(ctx, in)
	fmt.Println("started:", started)
	// ... the call runs, with key-1 sent downstream ...
	_ = l.Complete(ctx, "key-1", "run-a", ledger.Outcome{Result: json.RawMessage(`{"number":7}`)})

	in.Owner = "run-b"
	e, started, _ := l.Begin(ctx, in)
	fmt.Println("started:", started, "stored:", string(e.Outcome.Result))

	in.ArgsHash = "other arguments"
	_, _, err := l.Begin(ctx, in)
	fmt.Println(errors.Is(err, ledger.ErrKeyReuse))

	// A message is claimed once per scope; a redelivery is a duplicate, and
	// the same ID with another payload is refused as a mismatch.
	m := ledger.Claim{Scope: ledger.MessageScope("acme", "webhooks"), ID: "evt_1", Fingerprint: ledger.MessageFingerprint([]byte(`{"amount":5}`))}
	fmt.Println(l.ClaimMessage(ctx, m), errors.Is(l.ClaimMessage(ctx, m), ledger.ErrDuplicateMessage))
	m.Fingerprint = ledger.MessageFingerprint([]byte(`{"amount":500}`))
	fmt.Println(errors.Is(l.ClaimMessage(ctx, m), ledger.ErrDuplicateMismatch))
	// Output:
	// started: true
	// started: false stored: {"number":7}
	// true
	// <nil> true
	// true
}
