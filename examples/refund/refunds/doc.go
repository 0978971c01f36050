// Package refunds is the refund-desk example of lockstep: refunds that
// need a human's approval, with the races, expiries and crashes that come
// with them.
//
// It shows:
//
//   - an approval request that carries what a reviewer needs: the tool and
//     its exact arguments, the model's rationale, and reviewer context
//     from the application (customer, order, history: nodes.WithReviewContext);
//   - first-wins decisions: two reviewers approve the same request at the
//     same moment (two goroutines calling approval.Inbox.Approve); one
//     decision is recorded and the other reviewer gets an
//     *approval.AlreadyDecidedError naming the winner; the refund is paid
//     once;
//   - a crash after the decision, simulated: the program drops the App
//     that recorded it before any worker resumed the thread and opens a new
//     one on the file, whose approval.Worker resumes the thread with the
//     recorded decision, once (the tests also SIGKILL a real worker
//     process right after the payment, before its checkpoint, and pay once
//     after the restart);
//   - expiry: a request nobody decides expires (the agent's clock is set
//     back while it raises the request, so the request is born old; no
//     lease or retry time the file holds is ever taken from a moved
//     clock), the sweeper (approval.Inbox.Sweep) records it as a
//     rejection, and the agent explains to the customer that the refund was
//     not approved in time and what happens next;
//   - a fake shop whose orders and payments live in their own tables
//     (shop_orders, refund_payments) of the lockstep database file, paying
//     refunds under the idempotency key the executor hands it.
//
// The agent is nodes.NewAgent (model ⇄ tools) with a scripted model, so the
// example runs offline. Run is the whole story and the command
// examples/refund calls it; Open wires the parts for tests and other
// programs; Graph builds the graph to draw it (the lockstep CLI draws the
// one a thread ran from the database: lockstep graph THREAD).
package refunds
