// Package booking is the hotel-booking example of lockstep: an agent that
// books hotels, behind a compliance node and an approval rule, on one
// SQLite file.
//
// It shows:
//
//   - a node that pauses a run with an interrupt.NodeInterrupt (the
//     compliance node holds a request whose guest name looks like SQL
//     injection): the thread is waiting, not failed, its Next names the
//     node and its interrupt carries the reason;
//   - a reviewer who inspects the held request, corrects it with
//     Runnable.UpdateState and continues the run with Runnable.Continue;
//     the agent then quotes and books exactly once;
//   - an approval rule on the arguments of a call (approval.Rules with an
//     ArgRule: bookings above PriceLimitEUR): the agent's book_hotel call
//     waits for the travel desk, who decide it with the lockstep CLI from
//     another process; the approval worker (approval.Worker) then resumes
//     the thread with the recorded decision;
//   - a fake hotel API that keeps its bookings in its own table
//     (hotel_bookings) of the same file and deduplicates them by the
//     idempotency key the executor hands it, and a ledger (nodes/ledger)
//     that records every booking, so no run, repeat or restart books twice.
//
// The graph is START → compliance → model ⇄ tools: nodes.NewAgent's loop
// with a node in front, assembled from nodes.NewModelNode,
// nodes.NewToolNode and nodes.RouteToolCalls. The model is scripted
// (package nodes/scripted), so the example runs offline.
//
// Run is the whole story; the command examples/hotelbooking calls it, and
// Graph builds the graph to draw it (the lockstep CLI draws the one a
// thread ran from the database: lockstep graph THREAD).
package booking
