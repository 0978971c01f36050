// Package safe calls code that lockstep does not own: the application's
// functions (tool bodies, nodes, routers, reducers, policies, secret
// providers...) and the methods of its types (Error, Is, As, MarshalJSON,
// UnmarshalJSON...). A panic in such code becomes a *Panic value, which
// the caller turns into a typed error naming what panicked; it never
// unwinds through lockstep or kills the process. A call that blocks never
// holds its caller past the caller's context: Bound gives it up and
// counts it as abandoned.
//
// # Errors
//
// Wrap reads an application error's text once and returns an *Error
// that answers Error from that text and errors.Is and errors.As by asking
// the application's error under recover: a panic in its Is, As or Unwrap
// methods reads as no match. The runtime wraps every error that comes
// back from application code at the point where it comes back, so that
// nothing it does later with the error (log it, store its text, match it
// with errors.Is) calls the application's methods unprotected.
//
// # Bounded calls
//
// Bound runs a function on a goroutine of its own when its context can
// end, and returns when the function does, or Grace after the context
// ends, whichever comes first. A function given up on keeps running (Go
// cannot stop it); the Counter passed to Bound counts it until it
// returns. Calls whose context cannot end run on the caller's goroutine,
// and so do calls Foreign says reach no application code, so that the
// common case costs nothing.
//
// # Concurrency
//
// The package holds no state but Foreign's cache of types; its functions
// and a Counter are safe for concurrent use.
package safe
