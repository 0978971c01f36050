// Package nodes holds lockstep's prebuilt graph nodes: the safe tool
// executor, the tool node that runs a model's tool calls with it, the
// model node that asks the model for its next message, and the prebuilt
// agent that loops between them.
//
// # Tools
//
// NewTool registers a tool from a typed body func(ctx, A, Env) (R, error):
// its name (1 to 64 of [A-Za-z0-9_-], matched byte for byte), a description
// for the model, a JSON Schema derived from A (validated before every call;
// a failure is an *ArgsError naming the field), and what it declares at
// registration: Destructive (with its approval.Risk tier), Idempotent,
// Timeout (per attempt), Retry, NaturalKey, Reconcile, Fallback, Version
// and Secrets. Credentials reach the body through Env, never as arguments.
//
// # The executor's questions, in order
//
// Executor.Execute asks, and stops at the first answer that ends the call:
//
//  1. Scope: is the tool bound to this agent? An unknown name, or a name
//     that differs in any byte (case, spaces, invisible or look-alike
//     characters), is a *ScopeError. A fallback is reachable only as the
//     fallback of its tool. The arguments are then canonicalised and
//     validated (*ArgsError: also for what would reach the body as
//     another value than the one hashed and approved, such as the escape
//     of a lone surrogate or a number a float field would round), and in
//     strict mode (the default) arguments that reference a secret are
//     refused (*SecretReferenceError).
//  2. Gate: the Policy (DenyDestructive when none is set; AlwaysApprove;
//     FromRules over approval.Rules, which may read the arguments) says
//     whether the call needs a human. If it does and Call.Approval is nil,
//     the call is blocked with *ConfirmationRequired carrying the tool, the
//     exact canonical arguments on CallArgs and their approval.ArgsHash. An
//     approval is bound to the exact call: a Decision whose ArgsHash
//     differs is refused (*ApprovalMismatchError); a rejection or an expiry
//     is a *DecisionError.
//  3. Memo: a read (Idempotent and not Destructive) is answered from
//     Call.Memo when an identical read ran before in the thread; identical
//     reads running at once run once.
//  4. Ledger: a write (anything else) goes through the idempotency ledger
//     when one is set (see below).
//  5. Run, with bounded, classified retries and a per-attempt timeout.
//  6. Fallback: when the retries are exhausted or the failure is permanent,
//     the tool's fallback runs through the same path (its own gate, memo or
//     ledger), and the Result says StatusFallback.
//
// # Memo
//
// The memo key is MemoKey: a length-prefixed SHA-256 over the tool's name,
// its version and the canonical arguments (package canon: object keys
// sorted, no whitespace, numbers by exact value so 1, 1.0 and 1e0 meet,
// strings as given with no Unicode normalisation; duplicate and
// case-variant keys rejected). Only successful reads are stored; errors,
// destructive and non-idempotent calls never touch the memo. The tool node
// keeps it in the thread's state (AgentState.Memo, a merge field), so it is
// checkpointed with the thread and shared by all its turns.
//
// # Idempotency keys and the ledger
//
// A write's key is IdempotencyKey(scope, tool, canonical arguments), the
// scope being the thread (or Call.Scope), or NaturalIdempotencyKey(tool,
// natural key) when the tool declares one: deterministic, length-prefixed,
// never random or time-based, the same in every process and version. The
// body gets it from Env.IdempotencyKey to send downstream. The ledger
// (package ledger) records the intent before the call and the outcome after
// it: a repeat is replayed (Result.Replayed, StatusReplayed: it already
// existed); the same key with other arguments is ledger.ErrKeyReuse; a
// concurrent duplicate is ledger.ErrInProgress (or waits, with
// WithWaitInProgress); a permanent failure is stored and replayed as a
// *ReplayedError. An attempt whose outcome is unknown (it timed out, or
// the context ended while it ran) leaves the intent pending, exactly as a
// process that died does, unless the tool DedupesByKey (its service
// enforces the key); a call that ends before its body started (cancelled
// after its intent was recorded, even when Begin reported the
// cancellation) gives its intent back, since it cannot have taken effect.
//
// Inside a graph run that holds its thread's lease (graph.TaskInfo.Leased),
// the intent records the thread and the run. The run holding the lease is
// the successor of every earlier run of the thread: an intent an earlier
// run left pending (it was killed, or stopped with Ctrl-C, inside the
// call) is of unknown outcome at once, ledger.ErrOutcomeUnknown, whatever
// its ledger lease. Elsewhere (another thread's run with the same natural
// key, a call outside a graph run) a pending intent is
// ledger.ErrInProgress while its lease lasts, and of unknown outcome after.
// A write of unknown outcome is reconciled by the tool's Reconcile hook
// when it has one, run again with the same key when it DedupesByKey, and
// otherwise not run again until its late result arrives, ledger.Resolve
// or Forget, or a human's decision (Call.Reconciled; the tool node asks
// with an approval request of RuleOutcomeUnknown) decides.
// ledger.ErrInProgress is never a call's outcome: the tool node fails its
// step with a transient *CallInProgressError, recording nothing for the
// call, which runs when the thread is continued.
// Anything else (transient, unclassified, a pause) is not stored, so a
// retry runs with the same key.
// Without a ledger a write gets no key and is never retried.
//
// # Retries
//
// Errors are classified by type, never by text (Classify): ClassPermanent
// (*HTTPError 401, 403, 404 and other 4xx, argument errors, panics,
// Permanent), ClassTransient (*HTTPError 408, 425, 429 and 5xx with their
// Retry-After, timeouts, Transient, RetryAfter), ClassPause (interrupts and
// *ConfirmationRequired: never retried) and ClassNone (not retried).
// Classification sees through wrapping; in a join a pause wins, then
// permanent. Only transient errors are retried, as the tool's
// retry.Policy says (Retry; DefaultRetry without it): up to its attempts,
// with exponential backoff, jitter and a cap, on the executor's Clock; a
// Retry-After is honoured up to the tool's MaxRetryAfter, and one beyond it
// ends the retries at once with a *RetryAfterError (ErrRetryAfterTooLong)
// that says when the service said to come back; no attempt starts
// past the context's deadline; cancellation stops at once. An attempt that
// outlives the tool's timeout is a *TimeoutError: its outcome is unknown
// (Indeterminate), so a write is retried after it (with the same key) only
// when it DedupesByKey, and its fallback does not run. A body that
// ignores its context is abandoned at the timeout and left running
// (Executor.Abandoned counts them); if a write's abandoned body succeeds
// after all, its late result goes into the ledger, unless an outcome is
// recorded there first, so that a repeat replays it. At most
// WithMaxAbandoned (default DefaultMaxAbandoned, 64) abandoned bodies run
// at once: at the cap no attempt of any tool starts, and the call fails at
// once with *AbandonedLimitError, until some of them return.
//
// # Application code
//
// Every call into a tool's code and the application's is contained: the
// body (and the JSON methods of its argument and result types), the
// methods of the error it returns (Error, Unwrap, Is, As, RetryClass,
// Indeterminate: a typed nil whose Error reads its receiver is the common
// case), its Reconcile and NaturalKey functions, the gate Policy, the
// SecretProvider, a MemoStore, and in the tool node the reviewer-context
// function, the outcome recorder and the goroutines that run reads. A
// panic is a *PanicError of the call naming the tool and what panicked
// (In), never a crash; a policy that panics denies, a secret provider
// that panics is a *SecretError (its panic value may quote a secret and is
// not shown), a memo store that panics is left out. A tool error is read
// once, on the goroutine that ran the body and within its timeout; what
// the executor keeps answers errors.Is and errors.As as the tool's error
// does. Code that takes no per-attempt timeout runs under the call's
// context: the policy, the provider, NaturalKey, the reviewer-context
// function and the recorder are given up on when it ends (after a grace
// of 100 ms; the error matches graph.ErrAbandoned and the context's), and
// Reconcile at the tool's timeout, like a body; Executor.Abandoned counts
// them until they return.
//
// # Logging
//
// Every decision is one slog record, message "tool decision", with the
// attributes status (blocked, approved, rejected, expired, cache_hit,
// replayed, executed, retry, failed, fallback), tool, call_id, thread, and
// args: the canonical arguments with known secret values and the values of
// credential-like keys replaced by [REDACTED] and long strings cut; plus
// rule, reviewer, key, attempt, wait, late, error or reason as they apply.
//
// # Secrets
//
// A SecretProvider supplies the secrets a tool declares, at call time. They
// are handed to the body as Secret values that print as [REDACTED], and
// every value of 4 bytes or more the executor has handed out is redacted
// from error messages, log attributes, results (and so the memo, the
// ledger and the checkpoints), ledger failures, approval requests and the
// questions tool bodies ask. It is recognised as is, in any mix of ASCII
// letter case (a space and '+' alike), with any of its characters
// JSON-escaped (\u0041, \/) or URL-escaped (%2F or %2f), in hex of either
// case, and in base64 (either alphabet, padded or not), whole or inside a
// longer encoded text such as HTTP Basic credentials (there the characters
// it shares with its neighbours, a few bits at each end, stay). Results,
// reviewer context and questions are JSON and are redacted value by value,
// after their own escapes are decoded, so that they stay valid JSON: a
// number that holds a secret becomes the string [REDACTED], and object keys
// that redact alike are kept apart (#2, #3...).
//
// Parts of a value are redacted too: any run of 8 bytes or more of it, in
// each of those spellings (16 hex digits, or the 10 base64 characters that
// 8 bytes always fill), wherever it is. A value a body writes in parts (the
// first 12 bytes in one attempt's error and the rest in the next, so on two
// log records; wrapped across lines; in two fields of a result) loses every
// part of 8 bytes or more. What can stay readable, in each text lockstep
// writes, is a run of at most 7 bytes of a secret, and of a value of 16
// bytes or more split in two, at most 7 bytes in all (one of the two parts
// has 8 or more; in base64, the few bits above besides). A value of 4 to 7 bytes is recognised only whole (inside
// a longer base64 text, only where 8 characters or more are its own): its
// parts stay. Shorter values would shred ordinary text, so the executor
// does not hand them out: a value shorter than 4 bytes (once trimmed of
// surrounding white space) fails the call with a *SecretError.
//
// Redaction hides a value, not its existence, and it cannot tell a secret's
// bytes from the same bytes in ordinary text: a value that is part of
// ordinary words is redacted inside them too, so a low-entropy secret can
// be guessed from what is left around [REDACTED], and any 8 bytes it shares
// with ordinary text are redacted there (a key's public prefix of 8 bytes,
// such as "sk_live_", wherever it appears). In strict mode an argument
// holding 8 bytes of a secret is refused like one holding it whole. Use
// credentials of high entropy and of 16 bytes or more. A value split into
// parts of fewer than 8 bytes each, or encoded some other way (encrypted,
// reversed, interleaved with other text), is not recognised.
//
// A body's question is redacted before the runtime saves it (in the
// checkpoint's interrupt write) or shows it to a reviewer, however the
// body pauses: with Ask, with interrupt.Ask or interrupt.AskKey under its
// context or one derived from it (the executor installs an
// interrupt.WithFilter there), or by returning an *interrupt.NodeInterrupt,
// whose value is redacted (the error around it is dropped). A body that
// calls the interrupt.Resumer of its context itself bypasses this.
//
// # The tool node
//
// ToolNode (or NewToolNode with StateAccess for a state type of your own)
// runs the tool calls of the last assistant message: reads in parallel,
// writes in call order, each inside graph.Durable(ctx, "tool:"+callID, ...)
// so finished calls do not run again when the node runs again. It appends
// one tool Message per call, whose content is an Observation: the result,
// or what went wrong and what to do next. A passing condition is never a
// call's result: a storage failure of the ledger, or a write in progress in
// another live run (*CallInProgressError, ErrCallInProgress), fails the
// node's step instead, and the call is decided when the thread is
// continued. A blocked call becomes an
// approval.Request (tool, canonical arguments, hash, the model's rationale,
// reviewer context, risk, rule, owner, schema, kind, created and expires
// times) raised with interrupt.AskKey[approval.Decision] keyed by the call,
// so every gated call of the message is asked at once: a reviewer sees all
// the pending approvals of the turn, the run waits on all of them, and
// each is decided and resumed on its own, by its interrupt ID (the
// approval ID). The request's Kind says what is asked: approval.KindGate
// (the model's call), approval.KindFallback (a gated fallback after its
// tool failed; FallbackFor names the tool) or approval.KindOutcomeUnknown
// (run a write again whose earlier outcome is unknown: Tool is the tool
// whose write it is, a fallback of the model's call included, with
// FallbackFor the tool it stands in for). The resume answer
// must be a decision an approval.Store recorded: one that lacks the
// approval ID, the reviewer or the decision time was built by hand and is
// refused (*UnrecordedDecisionError, matching ErrUnrecordedDecision,
// inside an *interrupt.AnswerError): the resume fails, nothing runs, and
// the request keeps waiting for a recorded decision. This checks the
// shape of the answer, not where it came from: resume through
// approval.Worker, so that the answer is the one recorded. On resume an
// approval runs exactly the approved arguments once; a decision recorded
// for another request (its ID differs) is refused (*DecisionIDError). A
// decision is bound to its thread, task and call by where it arrives,
// not by what it says: the approval ID is the interrupt ID, derived from
// the thread, the task and the call's key, and a resume answer reaches
// only the task that raised that interrupt, so a decision made for one
// thread cannot be presented to another (an answer keyed by another
// thread's interrupt ID is refused with graph.ErrUnknownInterrupt); an
// edit is validated and gated again (and asked again if another rule
// gates it); a rejection or expiry becomes a result telling the model not
// to retry. Past WithMaxApprovalRequests requests for the same call in one
// turn, the model is told to stop asking. Tool bodies that ask a human
// use Ask, keyed by their call, so that parallel calls can ask at once
// (a body's interrupt.Ask is redacted alike, but numbered by position
// across the whole node, which parallel calls share).
//
// # Models and the model node
//
// Model is lockstep's own one-method interface to a chat model:
// Generate(ctx, messages, tools) returns the next assistant message (text
// and tool calls). FromLangchaingo adapts a langchaingo llms.Model (tested
// with the OpenAI client, OpenAI-compatible endpoints and the Anthropic
// client, whose message shapes it works around; langchaingo v0.1.14's
// Ollama client has no tools, so a call with tools through it fails with
// a *ClientLimitError; see its doc): it binds the tools as langchaingo
// function tools from their JSON Schemas and maps messages both ways
// (assistant tool calls as llms.ToolCall parts, tool results as
// llms.ToolCallResponse parts); this package is the only one of lockstep
// that imports langchaingo, in that one file. Package nodes/scripted is a
// Model that answers from a script, for offline runs, examples and tests.
//
// ModelNode (or NewModelNode with StateAccess) calls the model with the
// conversation, after an optional system prompt, and the tools it may use,
// and appends the answer as one assistant message (an append field). A
// model error, an empty answer or a tool call without a tool name fails
// the node with a *ModelError naming it (ErrModel, ErrEmptyAnswer,
// ErrMalformedAnswer); the model never silently answers nothing. Tool calls
// without an ID get a deterministic one; their arguments go to the
// executor as sent, so a malformed argument is a tool result the model
// can correct.
//
// In a streamed run (graph's Runnable.Stream) the model node streams its
// model's answer as it arrives: a graph.EventMessages event per chunk,
// whose Data is a MessageChunk (the node, the message's ID, text, or a
// piece of a tool call). FromLangchaingo asks its client for a token
// stream through langchaingo's streaming callback only then (Streamed),
// so a run that is not streamed costs nothing extra; another Model
// streams with StreamChunk. Chunks are best effort: joined, they are the
// message the node saves, and only that message is durable.
//
// # The agent
//
// NewAgent (or NewAgentFor, over a state of your own) builds the prebuilt
// agent graph: model ↔ tools, going to the tool node when the last
// assistant message has tool calls and ending when it has none. The tools
// are scoped per agent: the model is offered its executor's tools and the
// tool node runs calls through that executor only. AgentOptions passes
// the system prompt and the tool node's options (approval rules, reviewer
// context, audit) through, and sets the recursion limit to 2×MaxTurns,
// what MaxTurns model calls of one run take. Compile it with a saver.
package nodes
