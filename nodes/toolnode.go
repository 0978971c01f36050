package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// RuleOutcomeUnknown is the rule of an approval request that asks whether
// to run a write again whose earlier attempt has an unknown outcome.
const RuleOutcomeUnknown = "outcome_unknown"

// DefaultMaxApprovalRequests is how many approval requests one call may
// raise in one turn before the model is told to stop asking.
const DefaultMaxApprovalRequests = 3

// Notes the model reads in tool results.
const (
	NoteRejected   = "A human rejected this call. Do not retry it. Find another way, or escalate to the user."
	NoteExpired    = "Nobody approved this call in time, so it was not run (an expired request is a rejection). Do not retry it. Find another way, or escalate to the user."
	NoteStopAsking = "Approval for this exact call has already been requested the maximum number of times in this turn. Stop asking: tell the user it needs a human decision and how to proceed."
	NoteReplayed   = "This operation already happened earlier; this is its stored result. It already existed: nothing new was created now."
	NoteMismatch   = "The approval given does not cover these exact arguments, so the call was not run."
	// NoteWrongDecision answers a call whose decision was recorded for
	// another approval request.
	NoteWrongDecision = "The decision given was for another approval request, so this call was not run. Do not retry it on your own; tell the user it still needs a human decision."
	NoteUnknown       = "An earlier attempt of this operation may have taken effect, and its outcome is unknown. It will not be run again until a human reconciles it. Do not retry; tell the user."
)

// StateAccess lets the tool node, the model node and the agent work on
// any state type: how to read the messages and the memo, and how to write
// new messages and memo entries.
type StateAccess[S any] struct {
	// Messages returns the conversation (required).
	Messages func(S) []Message
	// Memo returns the thread's memo; nil means no memo.
	Memo func(S) map[string]MemoEntry
	// Update returns a node's update: the messages to append (the tool
	// node's tool messages in call order, or the model node's assistant
	// message) and the memo entries to merge (nil when there are none).
	// Required.
	Update func(messages []Message, memo map[string]MemoEntry) graph.Update[S]
}

// AgentAccess is the StateAccess of AgentState.
func AgentAccess() StateAccess[AgentState] {
	return StateAccess[AgentState]{
		Messages: func(s AgentState) []Message { return s.Messages },
		Memo:     func(s AgentState) map[string]MemoEntry { return s.Memo },
		Update: func(msgs []Message, memo map[string]MemoEntry) graph.Update[AgentState] {
			fields := []string{"Messages"}
			if len(memo) > 0 {
				fields = append(fields, "Memo")
			}
			return graph.Set(AgentState{Messages: msgs, Memo: memo}, fields...)
		},
	}
}

// ToolNodeOption configures a tool node.
type ToolNodeOption func(*toolNode)

// WithApprovalRules sets the rules whose TTL and owners approval requests
// carry (default: the executor's RulesPolicy, or approval.Rules{}: 24 h,
// no owner). They do not change which calls are gated: the executor's
// policy decides that. Rules that fail approval.Rules.Validate make
// NewToolNode fail with ErrInvalidConfig.
func WithApprovalRules(r approval.Rules) ToolNodeOption {
	return func(n *toolNode) { n.rules, n.haveRules = r, true }
}

// WithNodeClock sets the clock of approval requests' times (default
// time.Now): their CreatedAt and ExpiresAt, which the approval store
// compares with its own clock to judge expiry. Give it the store's clock.
func WithNodeClock(now func() time.Time) ToolNodeOption {
	return func(n *toolNode) {
		if now != nil {
			n.now = now
		}
	}
}

// WithReviewContext attaches application context to approval requests
// (customer, order, history): fn returns JSON for the reviewer. Its error
// fails the node. Known secret values are redacted from both (from the
// error's text; the error itself is wrapped, for errors.Is and errors.As).
func WithReviewContext(fn func(ctx context.Context, call ToolCall, msgs []Message) (json.RawMessage, error)) ToolNodeOption {
	return func(n *toolNode) { n.review = fn }
}

// WithMaxApprovalRequests sets how many approval requests the same call
// (tool and arguments) may raise in one turn (the messages since the last
// user message) before the model is told to stop asking (default
// DefaultMaxApprovalRequests).
func WithMaxApprovalRequests(k int) ToolNodeOption { return func(n *toolNode) { n.maxAsks = k } }

// WithOutcomeRecorder reports what ran for every approved call to rec (the
// approval store's audit trail): the idempotency key, the hash of the
// arguments that ran, and the result or the error. It is called after the
// call's result is saved, and again if the node runs again (recording the
// same outcome twice is not an error). A recorder error other than the
// store's typed refusals fails the node, so that the record is retried;
// the call itself does not run again.
//
// When rec also reads decisions (an approval.Store does: Get), an approved
// or edited decision runs only if it is the decision the store recorded
// for its approval ID: when the store holds another one (an expiry that
// an observer recorded, a rejection), that one is applied instead, and
// the call does not run. A failure to read fails the node.
func WithOutcomeRecorder(rec approval.OutcomeRecorder) ToolNodeOption {
	return func(n *toolNode) { n.recorder = rec }
}

// WithParallelism caps the reads that run at once (default 8; 1 runs every
// call in order).
func WithParallelism(k int) ToolNodeOption { return func(n *toolNode) { n.parallel = k } }

type toolNode struct {
	ex        *Executor
	rules     approval.Rules
	haveRules bool
	now       func() time.Time
	review    func(ctx context.Context, call ToolCall, msgs []Message) (json.RawMessage, error)
	maxAsks   int
	parallel  int
	recorder  approval.OutcomeRecorder
}

// NewToolNode returns a graph node that runs the tool calls of the last
// assistant message and appends one tool message per call, in call order.
//
// Reads run in parallel; writes run one after the other in call order.
// Each call runs inside graph.Durable(ctx, "tool:"+callID, …), so calls that
// finished are not run again when the node runs again (after a pause, a
// failure or a crash). Every call the gate blocks becomes an
// approval.Request raised with interrupt.AskKey, keyed by its call ID, so
// all the gated calls of one message are asked together: the run pauses
// with every request of the message, and each is answered by its interrupt
// ID (graph.Command.ResumeByID; the approval package's Worker does this),
// in any order and at any time. An answered call is decided and run on the
// next run of the node, while the thread keeps waiting on the others; the
// node completes when all are answered. The answer must be a decision an
// approval.Store recorded (the Worker resumes with those): one without an
// approval ID, a reviewer or a decision time was built by hand, and the
// node fails with an *UnrecordedDecisionError inside an
// *interrupt.AnswerError, so that the runtime takes the answer back: the
// call does not run and its request waits for a recorded decision. A
// decision is bound to the exact call: one whose ID is not its request's
// interrupt ID is refused (*DecisionIDError), as is one for other
// arguments (*ApprovalMismatchError). An approval runs exactly the approved
// arguments once (through the ledger); an edit is validated and gated
// again (asked again, with a new interrupt, when a different rule gates
// it); a rejection or an expiry becomes a tool result the model can act
// on. Tool bodies that ask a human themselves should use Ask (keyed by
// their call), so that parallel calls can ask at once. Calls of one
// message that share an ID are not run (a tool result with
// ErrDuplicateCallID for each): their questions, decisions and results
// could not be told apart.
//
// A write whose idempotency key an earlier run of the thread left without
// an outcome (that run was killed or stopped inside the call) is of
// unknown outcome at once: the executor reconciles it (Reconcile) or runs
// it again when its service DedupesByKey, and otherwise the call waits for
// a human on an approval request with RuleOutcomeUnknown
// (approval.KindOutcomeUnknown), whose approval runs it again. The request
// names the tool whose write is unknown: when that is a fallback that ran
// after the model's call failed, the fallback (FallbackFor naming the
// failed tool), and approving runs the fallback, not the failed tool.
//
// The node fails (returns an error) on a ledger storage failure, a
// reviewer-context failure, a cancelled context, and a write another live
// run holds (a *CallInProgressError, transient: nothing is recorded for the
// call, which runs when the thread is continued); tool errors become tool
// results. NewToolNode returns an error matching ErrInvalidConfig when ex,
// acc.Messages or acc.Update is nil or an option is out of range.
func NewToolNode[S any](ex *Executor, acc StateAccess[S], opts ...ToolNodeOption) (graph.NodeFunc[S], error) {
	if ex == nil || acc.Messages == nil || acc.Update == nil {
		return nil, fmt.Errorf("%w: tool node needs an executor and StateAccess.Messages and Update", ErrInvalidConfig)
	}
	n := &toolNode{ex: ex, now: time.Now, maxAsks: DefaultMaxApprovalRequests, parallel: 8}
	if rp, ok := ex.policy.(RulesPolicy); ok {
		n.rules = rp.Rules
	}
	for _, o := range opts {
		if o != nil {
			o(n)
		}
	}
	if n.maxAsks < 1 || n.parallel < 1 {
		return nil, fmt.Errorf("%w: max approval requests and parallelism must be at least 1", ErrInvalidConfig)
	}
	if err := n.rules.Validate(); err != nil {
		return nil, fmt.Errorf("%w: tool node approval rules: %w", ErrInvalidConfig, err)
	}
	return func(ctx context.Context, s S) (graph.Update[S], error) {
		var memo map[string]MemoEntry
		if acc.Memo != nil {
			memo = acc.Memo(s)
		}
		msgs, added, err := n.run(ctx, acc.Messages(s), memo, acc.Memo != nil)
		if err != nil || msgs == nil {
			return graph.Update[S]{}, err
		}
		return acc.Update(msgs, added), nil
	}, nil
}

// ToolNode is NewToolNode over AgentState. It returns an error matching
// ErrInvalidConfig when ex is nil or an option is out of range.
func ToolNode(ex *Executor, opts ...ToolNodeOption) (graph.NodeFunc[AgentState], error) {
	return NewToolNode(ex, AgentAccess(), opts...)
}

// outcome is the saved result of one step of a call: a finished tool
// message, or a call that waits for a human.
type outcome struct {
	Done    *Message             `json:"done,omitempty"`
	Pending *pendingCall         `json:"pending,omitempty"`
	Memo    map[string]MemoEntry `json:"memo,omitempty"`
	// Ran is what an approved call ran, for the approval audit.
	Ran *approval.Execution `json:"ran,omitempty"`
}

// pendingCall is a call waiting for a human.
type pendingCall struct {
	Tool        string          `json:"tool"`
	FallbackFor string          `json:"fallback_for,omitempty"`
	Args        json.RawMessage `json:"args"` // canonical
	ArgsHash    string          `json:"args_hash"`
	Rule        string          `json:"rule"`
	Risk        approval.Risk   `json:"risk"`
	Reconcile   bool            `json:"reconcile,omitempty"` // run again after an unknown outcome
	Cause       string          `json:"cause,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

// callMemo is the memo view of one call: it reads the node's memo and
// remembers what this call added, so that the additions are saved with the
// call's durable result.
type callMemo struct {
	shared *Memo
	mu     sync.Mutex
	added  map[string]MemoEntry
}

func (m *callMemo) Get(key string) (MemoEntry, bool) { return m.shared.Get(key) }

func (m *callMemo) Put(key string, e MemoEntry) {
	m.shared.Put(key, e)
	m.mu.Lock()
	if m.added == nil {
		m.added = map[string]MemoEntry{}
	}
	m.added[key] = e
	m.mu.Unlock()
}

// callRun is the state of one call within a node execution.
type callRun struct {
	call   ToolCall
	step   string // durable step name
	out    outcome
	asked  int
	last   approval.Outcome // the last decision's outcome
	origin string           // the hash of the arguments the model sent, once known
	dupID  bool             // another call of the message has the same ID: not run
}

func (n *toolNode) run(ctx context.Context, msgs []Message, saved map[string]MemoEntry, useMemo bool) ([]Message, map[string]MemoEntry, error) {
	calls := LastToolCalls(msgs)
	if len(calls) == 0 {
		return nil, nil, nil
	}
	n.ex.learn(ctx) // before any request, log line or argument check
	rationale := msgs[len(msgs)-1].Content
	var memo *Memo
	if useMemo {
		memo = NewMemo(saved)
	}
	thread := ""
	if info, ok := graph.TaskFrom(ctx); ok {
		thread = info.Thread
	}
	runs := make([]*callRun, len(calls))
	taken := map[string]bool{}
	ids := map[string]int{}
	for _, c := range calls {
		ids[c.ID]++
	}
	for i, c := range calls {
		// The step name is "tool:"+ID (escaped if the ID holds the
		// characters the node's own names use, so that no ID can spell
		// another call's decision step); a call without an ID, or whose
		// name is taken, gets its position appended until the name is
		// unique in the message.
		step := "tool:" + stepID(c.ID)
		for c.ID == "" && step == "tool:" || taken[step] {
			step += "#" + strconv.Itoa(i)
		}
		taken[step] = true
		runs[i] = &callRun{call: c, step: step, dupID: c.ID != "" && ids[c.ID] > 1}
	}

	// Phase 1: every call's first step; reads in parallel, writes in order.
	errs := make([]error, len(calls))
	first := func(i int) {
		r := runs[i]
		if r.dupID {
			// Which answer or approval would be whose? Neither runs.
			c := Call{ID: r.call.ID, Tool: r.call.Name, Args: json.RawMessage(r.call.Arguments), Scope: thread}
			r.out = outcome{Done: n.errorMessage(r.call, c, fmt.Errorf("%w: %s", ErrDuplicateCallID, quote(r.call.ID)))}
			return
		}
		r.out, errs[i] = graph.Durable(ctx, r.step, func(ctx context.Context) (outcome, error) {
			return n.firstStep(ctx, thread, r.call, memo)
		})
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, n.parallel)
	var writes []int
	for i, c := range calls {
		t := n.ex.Tool(c.Name)
		if n.parallel == 1 || (t != nil && !t.read()) {
			writes = append(writes, i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// This goroutine is the tool node's: nothing may panic out of
			// it (the executor contains the tool's own code).
			if p := safe.Call(func() { first(i) }); p != nil {
				errs[i] = n.callPanic(calls[i], p)
			}
		}()
	}
	for _, i := range writes {
		first(i)
	}
	wg.Wait()
	var pauses []error
	for _, err := range errs {
		switch {
		case err == nil:
		case interrupt.Is(err):
			pauses = append(pauses, err) // a tool body asked a question
		default:
			return nil, nil, err
		}
	}
	if memo != nil {
		// Entries of calls that finished in an earlier run of the node.
		for _, r := range runs {
			for k, e := range r.out.Memo {
				if _, ok := memo.Get(k); !ok {
					memo.Put(k, e)
				}
			}
		}
	}

	// Phase 2: the calls waiting for a human, all at once. Each raises its
	// approval request with interrupt.AskKey, keyed by its step, so the run
	// pauses with every request of the message and each is answered by
	// its ID. An answered call is decided (and run) in call order, whether
	// or not its siblings are answered yet.
	var task string
	if info, ok := graph.TaskFrom(ctx); ok {
		task = info.TaskID
	}
	sameCall := map[string]int{} // gated calls so far in this message, by arguments hash
	for _, r := range runs {
		if r.out.Pending == nil {
			continue
		}
		r.origin = r.out.Pending.ArgsHash
		// Each gated call of the message counts as one request for the
		// limit, in call order, and so does each re-ask of the call
		// itself: the count never depends on which siblings are answered.
		before := priorAsks(msgs, r.origin) + sameCall[r.origin]
		sameCall[r.origin]++
		for round := 1; r.out.Pending != nil; round++ {
			pc := r.out.Pending
			if before+round-1 >= n.maxAsks || round > 2*n.maxAsks {
				r.out = outcome{Done: n.message(r.call, r.origin, Observation{Status: StatusBlocked, Note: NoteStopAsking}, StatusBlocked)}
				n.ex.event(ctx, slog.LevelInfo, StatusBlocked, &Call{ID: r.call.ID, Tool: pc.Tool, Scope: thread}, pc.Args, slog.String("reason", "approval request limit"))
				break
			}
			req, err := n.request(ctx, r.call, pc, rationale, msgs)
			if err != nil {
				return nil, nil, err
			}
			if err := req.Validate(); err != nil {
				return nil, nil, fmt.Errorf("nodes: tool node: approval request for call %s of %q: %w", quote(r.call.ID), pc.Tool, err)
			}
			key := approvalKey(r.step, round)
			want := interrupt.KeyID(task, key)
			// The task's span, for the run that resumes the request to
			// link to (in another process, maybe).
			req.TraceParent = n.ex.obs.TraceParent(ctx)
			dec, err := interrupt.AskKey[approval.Decision](ctx, key, req)
			if err != nil {
				if interrupt.Is(err) {
					n.ex.noteRaised(ctx, thread, want, r.call, req)
					pauses = append(pauses, err)
					break
				}
				return nil, nil, fmt.Errorf("nodes: tool node: approval answer for call %s of %q: %w", quote(r.call.ID), pc.Tool, err)
			}
			if err := n.unrecorded(ctx, thread, r.call, pc, dec, want); err != nil {
				return nil, nil, err
			}
			r.asked++
			r.last = dec.Outcome
			out, err := graph.Durable(ctx, r.step+"/decision:"+strconv.Itoa(round), func(ctx context.Context) (outcome, error) {
				return n.decide(ctx, thread, r.call, pc, dec, want, memo)
			})
			if err != nil {
				if interrupt.Is(err) {
					pauses = append(pauses, err) // the approved tool's body asked a question
					break
				}
				return nil, nil, err
			}
			if err := n.record(ctx, pc.Tool, dec, out.Ran); err != nil {
				return nil, nil, err
			}
			r.out = out
		}
	}
	if len(pauses) > 0 {
		return nil, nil, errors.Join(pauses...)
	}

	// The tool messages, in call order, and the memo entries added.
	out := make([]Message, len(runs))
	var added map[string]MemoEntry
	for i, r := range runs {
		m := *r.out.Done
		if m.Meta != nil {
			meta := *m.Meta
			if r.asked > 0 {
				meta.Asked, meta.Approval = r.asked, string(r.last)
				if r.origin != "" {
					meta.ArgsHash = r.origin
				}
			}
			m.Meta = &meta
		}
		out[i] = m
		if len(r.out.Memo) > 0 {
			if added == nil {
				added = map[string]MemoEntry{}
			}
			maps.Copy(added, r.out.Memo)
		}
	}
	return out, added, nil
}

// record reports what an approved call of tool ran to the outcome
// recorder.
func (n *toolNode) record(ctx context.Context, tool string, dec approval.Decision, ran *approval.Execution) error {
	if n.recorder == nil || ran == nil || dec.ID == "" {
		return nil
	}
	err := n.recordOutcome(ctx, tool, dec.ID, *ran)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, approval.ErrNotFound), errors.Is(err, approval.ErrNotApproved), errors.Is(err, approval.ErrArgsMismatch),
		errors.Is(err, approval.ErrOutcomeRecorded), errors.Is(err, approval.ErrInvalidArgs):
		n.ex.log.LogAttrs(ctx, slog.LevelWarn, "approval outcome not recorded", slog.String("approval", dec.ID), n.ex.errAttr(err))
		return nil
	}
	return fmt.Errorf("nodes: tool node: record the outcome of approval %s: %w", quote(dec.ID), err)
}

// priorAsks counts the approval requests raised in this turn (since the
// last user message) for the call with arguments hash h.
func priorAsks(msgs []Message, h string) int {
	if h == "" {
		return 0
	}
	k := 0
	for i := len(msgs) - 1; i >= 0 && msgs[i].Role != RoleUser; i-- {
		if m := msgs[i].Meta; msgs[i].Role == RoleTool && m != nil && m.ArgsHash == h {
			k += m.Asked
		}
	}
	return k
}

// firstStep runs a call as the model sent it.
func (n *toolNode) firstStep(ctx context.Context, thread string, tc ToolCall, memo *Memo) (outcome, error) {
	c := Call{ID: tc.ID, Tool: tc.Name, Args: json.RawMessage(tc.Arguments), Scope: thread}
	return n.execute(ctx, tc, c, memo, "")
}

// execute runs c and turns what happened into an outcome. Pauses,
// cancellations and ledger storage failures are returned as errors (the
// node stops); everything else is a tool message.
func (n *toolNode) execute(ctx context.Context, tc ToolCall, c Call, memo *Memo, cause string) (outcome, error) {
	var cm *callMemo
	if memo != nil {
		cm = &callMemo{shared: memo}
		c.Memo = cm
	}
	res, err := n.ex.Execute(ctx, c)
	var o outcome
	if cm != nil {
		o.Memo = cm.added
	}
	if err == nil {
		if c.FallbackFor != "" && res.FallbackFrom == "" {
			// An approved fallback, run after its tool failed earlier.
			res.Status, res.FallbackFrom, res.Cause = StatusFallback, c.FallbackFor, cause
		}
		o.Done = n.resultMessage(tc, res)
		return o, nil
	}
	var (
		cr      *ConfirmationRequired
		unknown *ledger.OutcomeUnknownError
		busy    *ledger.InProgressError
	)
	switch {
	case errors.As(err, &cr):
		o.Pending = &pendingCall{Tool: cr.Tool, FallbackFor: cr.FallbackFor, Args: cr.CallArgs, ArgsHash: cr.ArgsHash, Rule: cr.Rule, Risk: cr.Risk, Cause: cr.Cause, CreatedAt: n.now()}
		return o, nil
	case interrupt.Is(err), ctx.Err() != nil, errors.Is(err, ErrLedger):
		return outcome{}, err
	case errors.As(err, &busy):
		// Another live run holds the key (an intent of an earlier run of
		// this thread is of unknown outcome instead, see below). That is
		// a passing condition, not the call's outcome: saved as a tool
		// result it would tell the model that a run is still working
		// forever, and the write (an approved one: its decision) would
		// be used up. The node fails instead, recording nothing for the
		// call, so that it is tried again when the thread is continued
		// (the approval worker backs off): the holder records the
		// outcome, which is replayed, or its intent is found abandoned.
		return outcome{}, &CallInProgressError{Tool: c.Tool, CallID: tc.ID, RetryAfter: busy.LeaseUntil, Err: err}
	case errors.As(err, &unknown) && !c.Reconciled:
		// The request names the tool whose write is unknown: the call's
		// own, or a fallback of it that ran after the call failed.
		uc, t, ok := n.ex.unknownCall(c, unknown)
		if !ok {
			break
		}
		_, args, hash, verr := n.ex.Verdict(uc.Tool, uc.FallbackFor, uc.Args)
		if verr == nil {
			risk := t.risk
			if !risk.AtLeast(approval.RiskHigh) {
				risk = approval.RiskHigh
			}
			o.Pending = &pendingCall{Tool: t.name, FallbackFor: uc.FallbackFor, Args: args, ArgsHash: hash, Rule: RuleOutcomeUnknown, Risk: risk,
				Reconcile: true, Cause: n.ex.red.String(err.Error()), CreatedAt: n.now()}
			return o, nil
		}
	}
	o.Done = n.errorMessage(tc, c, err)
	return o, nil
}

// unrecorded refuses a decision that no approval store recorded: one
// without an approval ID, a reviewer or a decision time, built by hand
// (a zero time would also pass the deadline check of decide). It returns
// nil for a decision that has all three; otherwise an error around an
// *interrupt.AnswerError for id, the request's interrupt, so that the
// runtime takes the answer back and the request waits for another one.
func (n *toolNode) unrecorded(ctx context.Context, thread string, tc ToolCall, pc *pendingCall, dec approval.Decision, id string) error {
	var missing []string
	if dec.ID == "" {
		missing = append(missing, "approval ID")
	}
	if strings.TrimSpace(dec.Reviewer) == "" {
		missing = append(missing, "reviewer")
	}
	if dec.DecidedAt.IsZero() {
		missing = append(missing, "decision time")
	}
	if len(missing) == 0 {
		return nil
	}
	err := &UnrecordedDecisionError{Tool: pc.Tool, CallID: tc.ID, InterruptID: id, Missing: missing}
	n.ex.event(ctx, slog.LevelWarn, StatusBlocked, &Call{ID: tc.ID, Tool: pc.Tool, Scope: thread}, pc.Args, slog.String("reason", "unrecorded decision"), n.ex.errAttr(err))
	return fmt.Errorf("nodes: tool node: approval answer for call %s of %q: %w", quote(tc.ID), pc.Tool, &interrupt.AnswerError{ID: id, Err: err})
}

// approvalKey is the interrupt.AskKey key of round (from 1) of the
// approval requests of the call whose durable step is step. The round
// comes first, so keys of different calls and rounds never meet.
func approvalKey(step string, round int) string {
	return "approval/" + strconv.Itoa(round) + "/" + step
}

// decide applies a human's decision to a waiting call. id is the
// interrupt ID the decision answers ("" when unknown: no graph task).
func (n *toolNode) decide(ctx context.Context, thread string, tc ToolCall, pc *pendingCall, dec approval.Decision, id string, memo *Memo) (outcome, error) {
	c := Call{ID: tc.ID, Tool: pc.Tool, Args: pc.Args, Scope: thread, FallbackFor: pc.FallbackFor, Reconciled: pc.Reconcile}
	if id != "" && dec.ID != "" && dec.ID != id {
		// A decision recorded for another request (a reviewer's UI that
		// mixed up two requests): it does not cover this call.
		err := &DecisionIDError{Tool: pc.Tool, CallID: tc.ID, Want: id, Got: dec.ID}
		n.ex.event(ctx, slog.LevelWarn, StatusBlocked, &c, pc.Args, slog.String("reason", "decision_id_mismatch"), n.ex.errAttr(err))
		return outcome{Done: n.errorMessage(tc, c, err)}, nil
	}
	if dec.Allows() {
		rec, err := n.recorded(ctx, pc.Tool, dec)
		if err != nil {
			return outcome{}, err
		}
		if rec.Outcome != dec.Outcome || rec.ArgsHash != dec.ArgsHash || rec.Reviewer != dec.Reviewer || !rec.DecidedAt.Equal(dec.DecidedAt) {
			// The store recorded another decision (an expiry an observer
			// saw first): it is the one that counts.
			n.ex.event(ctx, slog.LevelWarn, StatusBlocked, &c, pc.Args, slog.String("reason", "decision differs from the recorded one"),
				slog.String("recorded", string(rec.Outcome)), slog.String("reviewer", rec.Reviewer))
			dec = rec
		}
	}
	expires := pc.CreatedAt.Add(n.rules.TTLOrDefault())
	if dec.Allows() && !dec.DecidedAt.IsZero() && !dec.DecidedAt.Before(expires) {
		dec.Outcome = approval.Expired // decided at or after the deadline
	}
	switch dec.Outcome {
	case approval.Approved:
		c.Approval = &dec
		if pc.Reconcile && dec.ArgsHash != pc.ArgsHash {
			err := &ApprovalMismatchError{Tool: pc.Tool, Approved: dec.ArgsHash, Called: pc.ArgsHash}
			n.ex.event(ctx, slog.LevelWarn, StatusBlocked, &c, pc.Args, slog.String("reason", "approval_mismatch"))
			return outcome{Done: n.errorMessage(tc, c, err)}, nil
		}
		o, err := n.execute(ctx, tc, c, memo, pc.Cause)
		return ranOf(c, o), err
	case approval.Edited:
		if pc.Reconcile {
			err := &ArgsError{Tool: pc.Tool, Path: "$", Reason: "a run-again decision cannot edit the arguments"}
			return outcome{Done: n.errorMessage(tc, c, err)}, nil
		}
		v, args, hash, err := n.ex.Verdict(pc.Tool, pc.FallbackFor, dec.Args)
		if err != nil {
			n.ex.event(ctx, slog.LevelWarn, StatusFailed, &c, nil, slog.String("reason", "edited arguments"), n.ex.errAttr(err))
			return outcome{Done: n.errorMessage(tc, c, err)}, nil
		}
		if dec.ArgsHash != hash {
			err := &ApprovalMismatchError{Tool: pc.Tool, Approved: dec.ArgsHash, Called: hash}
			n.ex.event(ctx, slog.LevelWarn, StatusBlocked, &c, args, slog.String("reason", "approval_mismatch"))
			return outcome{Done: n.errorMessage(tc, c, err)}, nil
		}
		if v.Need && v.Rule != pc.Rule {
			// The edit is gated by another rule: ask again for the edited call.
			n.ex.event(ctx, slog.LevelInfo, StatusBlocked, &c, args, slog.String("rule", v.Rule), slog.String("reason", "edited call gated by another rule"))
			return outcome{Pending: &pendingCall{Tool: pc.Tool, FallbackFor: pc.FallbackFor, Args: args, ArgsHash: hash, Rule: v.Rule, Risk: v.Risk, CreatedAt: n.now()}}, nil
		}
		c.Args, c.Approval = args, &dec
		o, err := n.execute(ctx, tc, c, memo, pc.Cause)
		return ranOf(c, o), err
	case approval.Rejected, approval.Expired:
		st := StatusRejected
		if dec.Outcome == approval.Expired {
			st = StatusExpired
		}
		n.ex.event(ctx, slog.LevelInfo, st, &c, pc.Args, slog.String("rule", pc.Rule), slog.String("reviewer", dec.Reviewer))
		err := &DecisionError{Tool: pc.Tool, Outcome: dec.Outcome, Reviewer: dec.Reviewer, Note: n.ex.red.String(dec.Note)}
		return outcome{Done: n.errorMessage(tc, c, err)}, nil
	}
	err := fmt.Errorf("nodes: tool %q: decision with unknown outcome %s; the call was not run", pc.Tool, quote(string(dec.Outcome)))
	n.ex.event(ctx, slog.LevelWarn, StatusBlocked, &c, pc.Args, slog.String("reason", "invalid decision"))
	return outcome{Done: n.errorMessage(tc, c, err)}, nil
}

// decisionReader is the part of an approval.Store that reads a decision.
type decisionReader interface {
	Get(ctx context.Context, id string) (approval.Record, error)
}

// recorded returns the decision the recorder's store holds for dec's
// approval ID, or dec itself when the recorder does not read decisions or
// the store has none for it. A failure to read is returned.
func (n *toolNode) recorded(ctx context.Context, tool string, dec approval.Decision) (approval.Decision, error) {
	rr, ok := n.recorder.(decisionReader)
	if !ok || dec.ID == "" {
		return dec, nil
	}
	rec, err := n.readRecorded(ctx, rr, tool, dec.ID)
	switch {
	case errors.Is(err, approval.ErrNotFound):
		return dec, nil
	case err != nil:
		return dec, fmt.Errorf("nodes: tool node: read the recorded decision of approval %s: %w", quote(dec.ID), err)
	}
	return rec.Decision, nil
}

// ranOf fills o.Ran from a finished approved call c: what the audit
// records (nothing when the call did not run).
func ranOf(c Call, o outcome) outcome {
	if o.Done == nil || o.Done.Meta == nil {
		return o
	}
	var obs Observation
	_ = json.Unmarshal([]byte(o.Done.Content), &obs)
	switch obs.Status {
	case StatusBlocked, StatusRejected, StatusExpired:
		return o
	}
	hash, _ := approval.ArgsHash(c.Tool, c.Args)
	e := &approval.Execution{IdempotencyKey: o.Done.Meta.Key, ArgsHash: hash, Result: obs.Result, Error: obs.Error}
	if obs.Error != "" {
		e.Result = nil
	}
	o.Ran = e
	return o
}

// request builds the approval request of a waiting call.
func (n *toolNode) request(ctx context.Context, tc ToolCall, pc *pendingCall, rationale string, msgs []Message) (approval.Request, error) {
	req := approval.Request{
		Type: approval.RequestType, Tool: pc.Tool, Args: pc.Args, ArgsHash: pc.ArgsHash, CallID: tc.ID,
		Rationale: n.ex.red.String(rationale), Risk: pc.Risk, Rule: pc.Rule, Owner: n.rules.OwnerOf(pc.Tool),
		CreatedAt: pc.CreatedAt, ExpiresAt: pc.CreatedAt.Add(n.rules.TTLOrDefault()),
	}
	if t := n.ex.scopeTool(Call{Tool: pc.Tool, FallbackFor: pc.FallbackFor}); t != nil {
		req.Schema = t.Schema()
	}
	switch {
	case pc.Reconcile:
		req.Kind = approval.KindOutcomeUnknown
	case pc.FallbackFor != "":
		req.Kind = approval.KindFallback
	default:
		req.Kind = approval.KindGate
	}
	req.FallbackFor = pc.FallbackFor
	if n.review != nil {
		rc, err := n.reviewContext(ctx, pc.Tool, tc, msgs)
		if err != nil {
			// A failed node's error text is logged and checkpointed.
			err = fmt.Errorf("nodes: tool node: reviewer context for call %s of %q: %w", quote(tc.ID), pc.Tool, err)
			return req, &redactedError{msg: n.ex.red.String(err.Error()), err: err}
		}
		if len(rc) > 0 {
			req.Context = n.ex.red.JSON(rc)
		}
	}
	return req, nil
}

func (n *toolNode) message(tc ToolCall, hash string, obs Observation, st Status) *Message {
	b, _ := json.Marshal(obs) // an Observation always encodes
	return &Message{Role: RoleTool, Content: string(b), ToolCallID: tc.ID, Name: tc.Name,
		Meta: &ToolMeta{Tool: tc.Name, ArgsHash: hash, Status: st, Key: obs.Key, Fallback: obs.Fallback}}
}

// resultMessage is the tool message of a successful call.
func (n *toolNode) resultMessage(tc ToolCall, res Result) *Message {
	obs := Observation{Status: res.Status, Result: res.Output, Key: res.Key}
	switch res.Status {
	case StatusReplayed:
		obs.Note = NoteReplayed
	case StatusCacheHit:
		obs.Note = "Answered from an identical earlier call in this thread."
	case StatusFallback:
		obs.Fallback = res.Tool
		obs.Note = fmt.Sprintf("Tool %q failed (%s); this result comes from its fallback %q.", res.FallbackFrom, res.Cause, res.Tool)
		if res.Replayed {
			obs.Note += " " + NoteReplayed
		}
	}
	hash, _ := approval.ArgsHash(tc.Name, json.RawMessage(tc.Arguments))
	return n.message(tc, hash, obs, res.Status)
}

// errorMessage is the tool message of a call that did not succeed: what
// happened and what the model should do next.
func (n *toolNode) errorMessage(tc ToolCall, c Call, err error) *Message {
	obs := Observation{Status: StatusFailed, Error: n.ex.red.String(err.Error())}
	var (
		de  *DecisionError
		ae  *ArgsError
		te  *ToolError
		re  *ReplayedError
		rae *RetryAfterError
	)
	switch {
	case errors.As(err, &de):
		obs.Status, obs.Note, obs.ReviewerNote, obs.Error = StatusRejected, NoteRejected, de.Note, ""
		if de.Outcome == approval.Expired {
			obs.Status, obs.Note = StatusExpired, NoteExpired
		}
	case errors.Is(err, ErrWrongDecision):
		obs.Status, obs.Note = StatusBlocked, NoteWrongDecision
	case errors.Is(err, ErrApprovalMismatch):
		obs.Status, obs.Note = StatusBlocked, NoteMismatch
	case errors.Is(err, ErrDuplicateCallID):
		obs.Note = "Another call in the same message has this call's ID, so neither was run. Call again, giving each call its own ID."
	case errors.Is(err, ErrUnknownTool):
		obs.Note = "No tool of this name is available to you. Use one of the tools you were given, spelled exactly."
	case errors.Is(err, ErrSecretReference):
		obs.Note = "Credentials are supplied by the runtime. Do not pass secrets or references to them as arguments."
	case errors.As(err, &ae):
		obs.Note = "Fix the argument named in the error and call again."
	case errors.Is(err, ledger.ErrOutcomeUnknown):
		obs.Note = NoteUnknown
	case errors.Is(err, ledger.ErrKeyReuse):
		obs.Note = "This idempotency key belongs to a different operation, so the call was not run. Do not retry it with changed arguments under the same key."
	case errors.As(err, &re):
		obs.Status, obs.Key = StatusReplayed, re.Key
		obs.Note = "This operation already ran and failed permanently; retrying it will fail the same way."
	case errors.Is(err, ErrAbandonedLimit):
		obs.Note = "Too many earlier tool calls are still running past their timeout, so this call was not started. Try again later, or tell the user."
		if errors.Is(err, ErrToolTimeout) {
			obs.Note += " An earlier attempt of it timed out and may have taken effect. Check before calling again."
		}
	case errors.As(err, &rae):
		obs.Note = fmt.Sprintf("The service asked to be called again no sooner than %s, so the call was not retried. Do not call it again before then; tell the user when it can be tried.", rae.At.UTC().Format(time.RFC3339))
	case errors.As(err, &te) && te.Exhausted:
		obs.Note = "The service kept failing; retries are used up. Try again later, or tell the user."
	case errors.Is(err, ErrToolTimeout):
		obs.Note = "The call timed out and may have taken effect. Check before calling again."
	default:
		obs.Note = "The call failed. Do not retry it with the same arguments; find another way, or tell the user."
	}
	hash, _ := approval.ArgsHash(c.Tool, c.Args)
	if c.Tool == tc.Name {
		hash, _ = approval.ArgsHash(tc.Name, json.RawMessage(tc.Arguments))
	}
	return n.message(tc, hash, obs, obs.Status)
}

// Ask pauses the run with question from inside a tool body, until a human
// answers, like interrupt.AskKey: key names the question within the call
// (env.CallID), so several calls of one message, running in parallel, can
// ask at once, and the run pauses with all their questions and the
// message's approval requests; each is answered by its interrupt ID. On
// resume the body runs again and Ask returns the answer decoded into T.
//
// It returns the zero T and the *interrupt.Error the body must return
// while no answer is waiting (the executor never retries it), an
// *interrupt.ValueError when question does not encode as JSON, an
// *interrupt.AnswerError when the answer does not decode into T, and
// interrupt.ErrNoRuntime outside a graph run. The question is saved with
// the secrets the executor handed out redacted, as results are (so is one
// a body raises with interrupt.Ask or interrupt.AskKey itself).
func Ask[T any](ctx context.Context, env Env, key string, question any) (T, error) {
	if env.red != nil {
		b, err := interrupt.Marshal(question)
		if err != nil {
			var zero T
			return zero, err
		}
		question = json.RawMessage(env.red.JSON(b))
	}
	return interrupt.AskKey[T](ctx, bodyAskKey(env.CallID, key), question)
}

// bodyAskKey is the interrupt.AskKey key of a tool body's question: the
// call ID is length-prefixed, so no two (call, key) pairs share a key, and
// the "tool/" prefix keeps them apart from the node's approval keys.
func bodyAskKey(callID, key string) string {
	return "tool/" + strconv.Itoa(len(callID)) + "/" + callID + "/" + key
}

// stepID is a tool-call ID as it goes into the names of the node's
// durable steps: as is, unless it holds '/', '#' or '%' (never in a
// provider's IDs), which are then escaped, so that no ID can spell the
// name of another call's step ("X/decision:1").
func stepID(id string) string {
	if !strings.ContainsAny(id, "/#%") {
		return id
	}
	return strings.NewReplacer("%", "%25", "/", "%2F", "#", "%23").Replace(id)
}
