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

	fmt.Println(l.ClaimMessage(ctx, "evt_1"), errors.Is(l.ClaimMessage(ctx, "evt_1"), ledger.ErrDuplicateMessage))
	// Output:
	// started: true
	// started: false stored: {"number":7}
	// true
	// <nil> true
}
