package reviewweb

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"reflect"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// writeJSON answers with v as JSON (HTML-safe escaping: < > & are
// \u-escaped, so a response sniffed as HTML runs nothing).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"the response could not be encoded"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// itemJSON is a pending approval in the API's list.
type itemJSON struct {
	ID        string        `json:"id"`
	Thread    string        `json:"thread"`
	Node      string        `json:"node"`
	Tool      string        `json:"tool"`
	Risk      approval.Risk `json:"risk"`
	Kind      approval.Kind `json:"kind"`
	Rule      string        `json:"rule,omitempty"`
	Owner     string        `json:"owner,omitempty"`
	Summary   string        `json:"summary"` // the arguments in one line, cut
	CreatedAt time.Time     `json:"created_at"`
	ExpiresAt time.Time     `json:"expires_at"`
}

func listItem(it approval.Item) itemJSON {
	r := it.Request
	k := r.Kind
	if k == "" {
		k = approval.KindGate
	}
	return itemJSON{ID: it.ID, Thread: it.Thread, Node: it.Node, Tool: r.Tool, Risk: r.Risk, Kind: k, Rule: r.Rule, Owner: r.Owner,
		Summary: display(string(r.Args), maxSummaryBytes, false).String(), CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC()}
}

// apiSession answers GET /api/v1/session: who the caller is and the token
// their state-changing requests carry in the X-CSRF-Token header.
func (h *Handler) apiSession(w http.ResponseWriter, r *http.Request) {
	rv := reviewerOf(r)
	writeJSON(w, http.StatusOK, map[string]any{"reviewer": rv.Name, "groups": rv.Groups, "csrf_token": h.csrfToken(rv)})
}

// apiList answers GET /api/v1/approvals.
func (h *Handler) apiList(w http.ResponseWriter, r *http.Request) {
	q, e := parseListQuery(r.URL.Query())
	if e != nil {
		h.fail(w, r, e)
		return
	}
	res, err := h.list(r.Context(), q)
	if err != nil {
		h.fail(w, r, h.classify(r.Context(), err))
		return
	}
	items := make([]itemJSON, 0, len(res.Items))
	for _, it := range res.Items {
		items = append(items, listItem(it))
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": items, "next_cursor": res.Next})
}

// approvalJSON is one approval in the API.
type approvalJSON struct {
	ID         string           `json:"id"`
	State      state            `json:"state"`
	Thread     string           `json:"thread"`
	Checkpoint string           `json:"checkpoint"`
	Node       string           `json:"node"`
	Request    approval.Request `json:"request"`
	// Trail is the audit trail once decided: the decision, the resume,
	// what ran.
	Trail *approval.Trail `json:"audit,omitempty"`
	// MayDecide says whether the caller may decide it now; Why says why
	// not.
	MayDecide  bool       `json:"may_decide"`
	Why        string     `json:"why_not,omitempty"`
	ThreadView threadView `json:"thread_view"`
}

// apiGet answers GET /api/v1/approvals/{id}.
func (h *Handler) apiGet(w http.ResponseWriter, r *http.Request) {
	v, err := h.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, h.classify(r.Context(), err))
		return
	}
	may, why := h.mayDecide(r, v)
	writeJSON(w, http.StatusOK, approvalJSON{ID: v.Item.ID, State: v.State, Thread: v.Item.Thread, Checkpoint: v.Item.Checkpoint, Node: v.Item.Node,
		Request: v.Item.Request, Trail: v.Trail, MayDecide: may, Why: why, ThreadView: h.thread(r.Context(), v)})
}

// mayDecide says whether the reviewer of r may approve v now, and if not,
// why.
func (h *Handler) mayDecide(r *http.Request, v approvalView) (bool, string) {
	switch v.State {
	case statePending:
	case stateExpired:
		return false, "it expired"
	default:
		return false, "it is decided"
	}
	if e := h.access(r.Context(), reviewerOf(r), v.Item, approval.Approved); e != nil {
		return false, e.Message
	}
	return true, ""
}

// decisionBody is the body of POST /api/v1/approvals/{id}/decision.
type decisionBody struct {
	Outcome approval.Outcome `json:"outcome"`
	Note    string           `json:"note,omitempty"`
	Args    json.RawMessage  `json:"args,omitempty"`
	DryRun  bool             `json:"dry_run,omitempty"`
}

var decisionSchema = strictjson.For(reflect.TypeFor[decisionBody]())

// parseDecisionJSON reads a decision body strictly: one JSON object with
// only the fields of decisionBody, no duplicate keys, valid UTF-8, an
// outcome of approved, rejected or edited, arguments only on an edit.
func parseDecisionJSON(body []byte) (decideInput, *apiError) {
	bad := func(msg string) (decideInput, *apiError) {
		return decideInput{}, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: msg}
	}
	if err := decisionSchema.Check(body); err != nil {
		return bad("the body is not a decision: " + err.Error())
	}
	var b decisionBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&b); err != nil {
		return bad("the body is not a decision: " + err.Error())
	}
	return checkDecision(b.Outcome, b.Note, b.Args, b.DryRun)
}

// checkDecision checks what a decision says on its own (the approval
// package checks it again): the outcome, the note, arguments only on an
// edit and JSON when given.
func checkDecision(o approval.Outcome, note string, args json.RawMessage, dry bool) (decideInput, *apiError) {
	invalid := func(msg string) (decideInput, *apiError) {
		return decideInput{}, &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_decision", Message: msg}
	}
	switch o {
	case approval.Approved, approval.Rejected, approval.Edited:
	default:
		return invalid(`outcome must be "approved", "rejected" or "edited"`)
	}
	if len(note) > approval.MaxNoteBytes {
		return invalid("the note is longer than the limit")
	}
	if o != approval.Edited && len(args) > 0 {
		return invalid("only an edit carries arguments")
	}
	if o == approval.Edited && !json.Valid(args) {
		return decideInput{}, &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_args", Message: "the edited arguments are not JSON",
			Problems: []Problem{{Path: "$", Reason: "not valid JSON"}}}
	}
	if dry && o != approval.Edited {
		return invalid("only an edit can be a dry run")
	}
	return decideInput{Outcome: o, Note: note, Args: args, DryRun: dry}, nil
}

// apiDecide answers POST /api/v1/approvals/{id}/decision.
func (h *Handler) apiDecide(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.fail(w, r, &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "send the decision as application/json"})
		return
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBodyBytes)); err != nil {
		h.fail(w, r, bodyError(err))
		return
	}
	in, e := parseDecisionJSON(buf.Bytes())
	if e != nil {
		h.fail(w, r, e)
		return
	}
	res, err := h.decide(r.Context(), reviewerOf(r), r.PathValue("id"), in)
	if err != nil {
		h.fail(w, r, h.classify(r.Context(), err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": res.Item.ID, "thread": res.Item.Thread, "recorded": res.Decision != nil,
		"decision": res.Decision, "changes": res.Changes})
}
