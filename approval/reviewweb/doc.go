// Package reviewweb is the reviewers' inbox on the web: an http.Handler
// that shows the pending approvals of all threads, lets a signed-in
// reviewer approve, reject or edit them, and serves the same as a JSON API
// with live updates. lockstep serve runs it on a database; an application
// mounts it with its own authenticator and policy.
//
//	h, err := reviewweb.New(reviewweb.Options{
//		Saver:  saver,                 // the checkpoint saver (read only)
//		Store:  store,                 // the approval store on the same database
//		Auth:   &reviewweb.TrustedProxy{Header: "X-Forwarded-Email", Proxies: proxies},
//		Policy: reviewweb.Grants{{Groups: []string{"travel-desk"}, Tools: []string{"book_hotel"}}},
//	})
//	...
//	defer h.Close()
//	http.Handle("/", h)
//
// A decision is the approval package's first-wins transition
// (approval.Inbox.Decide), the one lockstep approve makes: the first
// decision wins, the loser is told who won and when, and nothing is
// recorded twice. The handler records decisions only; a process running
// approval.Worker with the graph resumes the threads.
//
// # Pages
//
//   - GET / lists the pending approvals, soonest expiry first, with filters
//     (tool, owner, thread, risk, expiring_within) and paging (limit,
//     cursor). Each row shows the tool, its risk tier, the arguments in one
//     line, the thread, the age and the time left.
//   - GET /approvals/{id} shows one approval: the exact arguments as
//     formatted JSON, the model's rationale, the reviewer context the tool
//     supplies, the rule that raised it (and for an outcome-unknown request,
//     that the write may already have happened), the time left, the
//     thread's recent checkpoints with their statuses (computed from the
//     stored checkpoints, as lockstep state does), and the graph with the
//     waiting node marked, drawn on the server as SVG. Decided and expired
//     approvals stay readable, with their audit trail (approval.Store's
//     Audit).
//   - POST /approvals/{id}/decide is the decision form (action approve,
//     reject, edit to check an edit and see its diff, confirm to record the
//     edit). It works without JavaScript.
//   - GET /login?token=T or POST /login exchange a one-time login token for
//     a session (with a TokenLogin authenticator); POST /logout ends it.
//     Neither signs in from another site: the link is refused (403
//     cross_origin, the token kept) when the browser says another site
//     led to it (Sec-Fetch-Site), and the form as every POST is.
//
// With JavaScript, the pages follow GET /api/v1/events: a new pending
// approval appears in the list, and one decided elsewhere changes in place,
// without a reload. The stream opens only once the handler has read the
// pending list it compares with, and each time it opens (the first time,
// and after a reconnect) the page reads what changed since it was
// rendered, so no change between the two is missed. The script fetches fragments the server rendered
// (?fragment=rows, ?fragment=row, ?fragment=decision); no page is built in
// the browser.
//
// # JSON API
//
// Every endpoint needs a signed-in reviewer; POST needs the
// X-CSRF-Token header (its value comes from GET /api/v1/session) and
// Content-Type application/json.
//
//	GET  /api/v1/session                  {"reviewer", "groups", "csrf_token"}
//	GET  /api/v1/approvals?tool=&owner=&thread=&risk=&expiring_within=&limit=&cursor=
//	                                      {"approvals": [...], "next_cursor": "..."}
//	GET  /api/v1/approvals/{id}           the approval, pending or decided: state,
//	                                      request, audit, may_decide, thread_view
//	POST /api/v1/approvals/{id}/decision  {"outcome": "approved"|"rejected"|"edited",
//	                                       "note": "...", "args": {...}, "dry_run": bool}
//	                                      → {"recorded", "decision", "changes"}
//	GET  /api/v1/events                   text/event-stream of "approval" events:
//	                                      {"seq", "kind": "new"|"decided"|"expired"|"gone",
//	                                       "id", "outcome", "reviewer", "at"}
//
// A refusal is {"error": {"code", "message", "winner", "problems"}} with
// these statuses (the pages answer the same statuses):
//
//	400 bad_request, invalid_filter: a malformed body, filter or cursor
//	401 unauthenticated: no reviewer (no session, not from a trusted proxy)
//	403 forbidden (the Policy refuses), self_approval (the requester may not
//	    approve or edit their own call; they may reject it), cross_origin
//	    (a cross-site request), csrf (a missing or wrong token)
//	404 not_found: no pending approval or decision has the ID
//	409 already_decided: another decision won; winner says who, what, when
//	410 expired: the request expired (also when the expiry sweeper won)
//	413 too_large: a body over the limit (about 1 MiB of edited arguments)
//	415 unsupported_media_type: a decision that is not application/json
//	422 invalid_decision (an unknown outcome, an oversized note),
//	    invalid_args (an edit that fails the tool's schema: problems lists
//	    every problem at its JSON path; nothing is recorded),
//	    invalid_request (a stored request that can never be decided)
//	503 unavailable: the handler or the store is closed
//	500 corrupt: a stored row (an approval decision, a thread's
//	    checkpoints) does not verify; the message names the approval or the
//	    thread, the error is logged, and nothing was recorded
//	500 internal: a database failure (logged, not shown)
//
// An edit is checked against the JSON Schema stored in the request, shown
// (and returned, "changes") as a diff against the original, and recorded
// as an Edited decision; the tool node gates the edited call again as a new
// call, exactly as for lockstep approve --args. dry_run checks and diffs an
// edit without recording it.
//
// # Identity and safety
//
// No decision is anonymous. An Authenticator maps every request to a
// Reviewer; two ship: TrustedProxy, which believes a header set by an
// authenticating proxy only on connections from the proxy's addresses,
// and LocalToken, which exchanges a one-time login token for a session
// cookie (HttpOnly, SameSite=Strict). A Policy the application gives says
// who may decide what (Grants: by reviewer or group, tool, risk tier and
// owner). The identity that requested a call (RequesterFunc; by default the
// "requested_by" field of the request's context) can never approve it.
//
// Every state-changing request must come from the handler's own origin
// (http.CrossOriginProtection: Sec-Fetch-Site, else Origin against Host)
// and carry a token bound to the reviewer's session, which every form
// holds; either failure is answered 403 and changes nothing. Every response
// carries a strict Content-Security-Policy (scripts, styles and
// connections from the handler only, no inline script or style, no
// framing), nosniff and no-store. All assets are embedded; nothing is
// loaded from elsewhere.
//
// Everything a model or a tool produced (arguments, rationale, context,
// names) is escaped by html/template and cut to a length limit, with the
// cut said on the page; the JSON API returns it whole. Characters that
// would change how the rest reads are shown as visible marks and never
// obeyed: direction overrides and isolates (U+202E in "invoice‮fdp.exe"),
// zero-width and other format characters, control characters, and bytes
// that are not UTF-8. Text is isolated (bdi), links are made only to the
// handler's own pages, so a "javascript:" URL in an argument is text.
//
// # Graphs
//
// The page draws the graph a thread runs, its waiting node marked: by
// default the topology its head was saved under, which the graph stored
// in the saver (StoredGraph; graph.Topology); Options.Graph can give
// another source (StaticGraph(runnable.Topology()) for an application
// with one graph). Where neither knows the graph (a thread saved before
// lockstep stored topologies), the page draws the steps the thread's
// stored checkpoints show, and says so.
//
// # Concurrency and lifetime
//
// A Handler is safe for concurrent use. Live event streams share one
// poller of the inbox (Options.PollInterval), which runs only while a
// stream is open. Close ends the streams and the poller; call it before
// http.Server.Shutdown, which waits for open streams.
package reviewweb
