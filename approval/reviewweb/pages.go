package reviewweb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// parseTemplates parses the embedded templates: the layout and its
// fragments, then each page on a copy of them.
func parseTemplates(now func() time.Time) (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ms":   func(t time.Time) int64 { return t.UnixMilli() },
		"ts":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago":  func(t time.Time) string { return formatAge(now().Sub(t)) },
		"left": func(t time.Time) string { return leftText(t.Sub(now())) },
		"name": name,
	}
	base, err := template.New("base").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("reviewweb: templates: %w", err)
	}
	out := map[string]*template.Template{}
	for _, p := range []string{"list", "approval", "login", "error"} {
		c, err := base.Clone()
		if err == nil {
			_, err = c.ParseFS(assets, "assets/templates/"+p+".html")
		}
		if err != nil {
			return nil, fmt.Errorf("reviewweb: template %s: %w", p, err)
		}
		out[p] = c
	}
	return out, nil
}

// formatAge writes a duration for people: 45s, 12m, 3h05m, 2d04h.
func formatAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func leftText(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return formatAge(d) + " left"
}

// pageData is what every page's template gets.
type pageData struct {
	Title      string
	Page       string
	Prefix     string
	CSRF       string
	SignedIn   bool
	Reviewer   shown
	CanLogout  bool
	TokenLogin bool
	List       *listView
	A          *approvalPage
	Err        *apiError
}

func (h *Handler) newPage(r *http.Request, page, title string) *pageData {
	p := &pageData{Title: title, Page: page, Prefix: h.o.Prefix}
	if rv, ok := r.Context().Value(reviewerKey{}).(Reviewer); ok {
		p.SignedIn, p.Reviewer, p.CSRF = true, name(rv.Name), h.csrfToken(rv)
	}
	_, p.TokenLogin = h.o.Auth.(TokenLogin)
	p.CanLogout = p.SignedIn && p.TokenLogin
	return p
}

// render executes a page's template (or one of its fragments) into a
// buffer, so that a failure answers 500 instead of half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page, tmpl string, data *pageData) {
	var b bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&b, tmpl, data); err != nil {
		h.classify(r.Context(), fmt.Errorf("render %s/%s: %w", page, tmpl, err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func (h *Handler) errorPage(w http.ResponseWriter, r *http.Request, e *apiError) {
	if e.Status == http.StatusUnauthorized {
		p := h.newPage(r, "login", "Sign in")
		p.Err = e
		h.render(w, r, e.Status, "login", "layout", p)
		return
	}
	p := h.newPage(r, "error", http.StatusText(e.Status))
	p.Err = e
	h.render(w, r, e.Status, "error", "layout", p)
}

// listView is the list page.
type listView struct {
	Q        listQuery
	Rows     []rowView
	Next     string
	Risks    []approval.Risk
	Filtered bool
	Expiring string
}

// rowView is a row of the list.
type rowView struct {
	ID, URL   string
	Tool      shown
	Risk      shown
	RiskClass string
	Summary   shown
	Thread    shown
	Created   time.Time
	Expires   time.Time
	State     state
	Outdated  string // what became of a row that is no longer pending
}

func riskClass(r approval.Risk) string {
	if r.Valid() {
		return string(r)
	}
	return "unknown"
}

func (h *Handler) rowOf(it approval.Item, st state, outdated string) rowView {
	r := it.Request
	return rowView{ID: it.ID, URL: h.url("/approvals/" + url.PathEscape(it.ID)), Tool: name(r.Tool), Risk: name(string(r.Risk)), RiskClass: riskClass(r.Risk),
		Summary: display(string(r.Args), maxSummaryBytes, false), Thread: name(it.Thread), Created: r.CreatedAt, Expires: r.ExpiresAt, State: st, Outdated: outdated}
}

// listPage answers GET /: the pending list (or, with fragment=rows, its
// rows alone, for the live update).
func (h *Handler) listPage(w http.ResponseWriter, r *http.Request) {
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
	lv := &listView{Q: q, Risks: []approval.Risk{approval.RiskNone, approval.RiskLow, approval.RiskMedium, approval.RiskHigh, approval.RiskCritical}}
	lv.Filtered = len(q.values()) > 0
	if q.ExpiringWithin > 0 {
		lv.Expiring = r.URL.Query().Get("expiring_within")
	}
	for _, it := range res.Items {
		lv.Rows = append(lv.Rows, h.rowOf(it, statePending, ""))
	}
	if res.Next != "" {
		v := q.values()
		v.Set("cursor", res.Next)
		lv.Next = h.url("/?" + v.Encode())
	}
	p := h.newPage(r, "list", "Pending approvals")
	p.List = lv
	if r.URL.Query().Get("fragment") == "rows" {
		h.render(w, r, http.StatusOK, "list", "rows", p)
		return
	}
	h.render(w, r, http.StatusOK, "list", "layout", p)
}

// approvalPage is the page of one approval.
type approvalPage struct {
	ID            string
	IDShown       shown
	Req           approval.Request
	Tool, Risk    shown
	RiskClass     string
	State         state
	StateLine     string
	Kind          approval.Kind
	FallbackFor   shown
	Rule, Owner   shown
	CallID        shown
	Rationale     shown
	Args          shown
	ArgsBytes     int
	HasContext    bool
	Context       shown
	Thread, Node  shown
	ThreadURL     string
	Graph         *svgGraph
	GraphFromRuns bool
	ThreadProblem string
	History       []histView
	Trail         *trailView
	Err           *apiError
	Preview       *previewView
	May           bool
	MayReject     bool
	Why           string
	CanEdit       bool
	EditOpen      bool
	EditArgs      string
	Note          string
}

type histView struct {
	Step        int
	Source      shown
	Status      string
	StatusClass string
	Head        bool
	Created     time.Time
	Tasks       []taskView
}

type taskView struct {
	Node        shown
	Status      string
	StatusClass string
}

type trailView struct {
	Outcome     approval.Outcome
	OutcomeLine string
	Reviewer    shown
	At          time.Time
	Note        shown
	Changes     []changeView
	Resumed     bool
	ResumedAt   time.Time
	ResumeNote  shown
	Attempts    int
	LastError   shown
	Ran         bool
	Key         shown
	RanAt       time.Time
	RunError    shown
	Result      shown
}

type previewView struct {
	Args, Note string
	Changes    []changeView
}

type changeView struct {
	Path     shown
	Op       string
	Old, New shown
}

func changeViews(cs []Change) []changeView {
	out := make([]changeView, 0, len(cs))
	for _, c := range cs {
		out = append(out, changeView{Path: name(c.Path), Op: c.Op, Old: display(string(c.Old), maxSummaryBytes*4, false), New: display(string(c.New), maxSummaryBytes*4, false)})
	}
	return out
}

// pretty formats JSON with two-space indents for a page.
func pretty(raw json.RawMessage) shown {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return display(string(raw), maxJSONBytes, true)
	}
	return display(b.String(), maxJSONBytes, true)
}

func statusClass(s string) string {
	switch s {
	case "done", "waiting", "failed", "pending":
		return s
	}
	return "unknown"
}

var outcomeLines = map[approval.Outcome]string{
	approval.Approved: "Approved",
	approval.Rejected: "Rejected",
	approval.Edited:   "Approved with edited arguments",
	approval.Expired:  "Expired (rejected)",
}

// approvalData builds the page of v for the reviewer of r.
func (h *Handler) approvalData(ctx context.Context, r *http.Request, v approvalView) *approvalPage {
	it, req := v.Item, v.Item.Request
	kind := req.Kind
	if kind == "" {
		kind = approval.KindGate
	}
	a := &approvalPage{ID: it.ID, IDShown: name(it.ID), Req: req, Tool: name(req.Tool), Risk: name(string(req.Risk)), RiskClass: riskClass(req.Risk),
		State: v.State, Kind: kind, FallbackFor: name(req.FallbackFor), Rule: name(req.Rule), Owner: name(req.Owner), CallID: name(req.CallID),
		Rationale: display(req.Rationale, maxRationaleBytes, true), Args: pretty(req.Args), ArgsBytes: len(req.Args),
		HasContext: len(req.Context) > 0, Thread: name(it.Thread), ThreadURL: h.url("/?" + url.Values{"thread": {it.Thread}}.Encode())}
	if a.HasContext {
		a.Context = pretty(req.Context)
	}
	switch v.State {
	case statePending:
		a.StateLine = "Waiting for a decision."
	case stateExpired:
		a.StateLine = "Expired: it can no longer be approved."
	default:
		a.StateLine = "Decided: " + strings.ToLower(outcomeLines[v.Trail.Decision.Outcome]) + "."
	}
	a.May, a.Why = h.mayDecide(r, v)
	if !a.May && v.State == statePending {
		a.MayReject = h.access(ctx, reviewerOf(r), it, approval.Rejected) == nil
	}
	a.CanEdit = a.May && req.Editable() && len(req.Args) <= maxJSONBytes
	if a.CanEdit {
		a.EditArgs = pretty(req.Args).String()
	}
	if tr := v.Trail; tr != nil {
		d := tr.Decision
		t := &trailView{Outcome: d.Outcome, OutcomeLine: outcomeLines[d.Outcome], Reviewer: name(d.Reviewer), At: d.DecidedAt,
			Note: display(d.Note, maxRationaleBytes, true), Resumed: !tr.Resume.At.IsZero(), ResumedAt: tr.Resume.At,
			ResumeNote: display(tr.Resume.Note, maxRationaleBytes, false), Attempts: tr.Resume.Attempts, LastError: display(tr.Resume.LastError, maxRationaleBytes, false)}
		if d.Outcome == approval.Edited {
			if cs, err := diffJSON(tr.Request.Args, d.Args); err == nil {
				t.Changes = changeViews(cs)
			}
		}
		if ex := tr.Execution; ex != nil {
			t.Ran, t.Key, t.RanAt, t.RunError, t.Result = true, name(ex.IdempotencyKey), ex.At, display(ex.Error, maxRationaleBytes, false), display(string(ex.Result), maxSummaryBytes*4, false)
		}
		a.Trail = t
	}
	tv := h.thread(ctx, v)
	a.Node, a.ThreadProblem, a.GraphFromRuns = name(tv.Waiting), tv.Problem, tv.FromRuns
	g := layout(tv.Graph, tv.Waiting, tv.visited)
	a.Graph = &g
	for _, hr := range tv.History {
		hv := histView{Step: hr.Step, Source: name(hr.Source), Status: hr.Status, StatusClass: statusClass(hr.Status), Head: hr.Head, Created: hr.CreatedAt}
		for _, t := range hr.Tasks {
			hv.Tasks = append(hv.Tasks, taskView{Node: name(t.Node), Status: t.Status, StatusClass: statusClass(t.Status)})
		}
		a.History = append(a.History, hv)
	}
	return a
}

// approvalPage answers GET /approvals/{id}: the approval, pending or
// decided (with fragment=decision its decision section alone, with
// fragment=row its row in the list, for the live update).
func (h *Handler) approvalPage(w http.ResponseWriter, r *http.Request) {
	v, err := h.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, h.classify(r.Context(), err))
		return
	}
	switch r.URL.Query().Get("fragment") {
	case "row":
		p := h.newPage(r, "list", "")
		out := ""
		switch {
		case v.Trail != nil:
			out = fmt.Sprintf("%s by %s", outcomeLines[v.Trail.Decision.Outcome], display(v.Trail.Decision.Reviewer, maxNameBytes, false).String())
		case v.State == stateExpired:
			out = "Expired"
		}
		row := h.rowOf(v.Item, v.State, out)
		p.List = &listView{Rows: []rowView{row}}
		h.render(w, r, http.StatusOK, "list", "rows", p)
		return
	case "decision":
		p := h.newPage(r, "approval", "")
		p.A = h.approvalData(r.Context(), r, v)
		h.render(w, r, http.StatusOK, "approval", "decision", p)
		return
	}
	p := h.newPage(r, "approval", "Approval: "+display(v.Item.Request.Tool, maxNameBytes, false).String())
	p.A = h.approvalData(r.Context(), r, v)
	h.render(w, r, http.StatusOK, "approval", "layout", p)
}

// parseDecisionForm reads the decision form: action approve, reject,
// edit (check and show the diff) or confirm (record the edit), a note,
// and for edit and confirm the arguments as JSON text.
func parseDecisionForm(f url.Values) (decideInput, *apiError) {
	for k, vs := range f {
		if len(vs) > 1 {
			return decideInput{}, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("the form field %s is repeated", quote(k))}
		}
	}
	note, args := f.Get("note"), f.Get("args")
	var o approval.Outcome
	dry := false
	switch f.Get("action") {
	case "approve":
		o = approval.Approved
	case "reject":
		o = approval.Rejected
	case "edit":
		o, dry = approval.Edited, true
	case "confirm":
		o = approval.Edited
	default:
		return decideInput{}, &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_decision", Message: "the form's action must be approve, reject, edit or confirm"}
	}
	var raw json.RawMessage
	if o == approval.Edited {
		raw = json.RawMessage(strings.TrimSpace(args))
	}
	return checkDecision(o, note, raw, dry)
}

// decideForm answers POST /approvals/{id}/decide, the decision form,
// which works without JavaScript: a recorded decision redirects to the
// approval's page (303); an edit to check shows its diff and a form to
// confirm it; a refusal shows the page again with the reason, at the
// status the API would answer.
func (h *Handler) decideForm(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	in, e := parseDecisionForm(r.PostForm)
	var err error
	var res decideResult
	if e != nil {
		err = e
	} else {
		res, err = h.decide(r.Context(), reviewerOf(r), id, in)
	}
	if err == nil && res.Decision != nil {
		http.Redirect(w, r, h.url("/approvals/"+url.PathEscape(id)), http.StatusSeeOther)
		return
	}
	v, lerr := h.lookup(r.Context(), id)
	if lerr != nil {
		h.fail(w, r, h.classify(r.Context(), lerr))
		return
	}
	p := h.newPage(r, "approval", "Approval: "+display(v.Item.Request.Tool, maxNameBytes, false).String())
	a := h.approvalData(r.Context(), r, v)
	p.A = a
	a.Note = r.PostForm.Get("note")
	status := http.StatusOK
	if err != nil {
		ae := h.classify(r.Context(), err)
		a.Err, status = ae, ae.Status
		if in.Outcome == approval.Edited && a.CanEdit {
			a.EditArgs, a.EditOpen = r.PostForm.Get("args"), true
		}
	} else {
		a.Preview = &previewView{Args: string(in.Args), Note: in.Note, Changes: changeViews(res.Changes)}
	}
	h.render(w, r, status, "approval", "layout", p)
}

// loginPage answers GET /login: with ?token=, it spends the token and
// signs the browser in; without, it shows the sign-in form.
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		// Signing in changes state: a link on another site must not sign
		// the browser in (as whoever issued the token). A link opened
		// from the terminal or the address bar is "none"; browsers that
		// send no Sec-Fetch-Site are let through, as the POST form's
		// check (http.CrossOriginProtection) does without an Origin.
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
			h.fail(w, r, &apiError{Status: http.StatusForbidden, Code: "cross_origin",
				Message: "a link from another site cannot sign in here: open the sign-in link from the terminal, or paste it into the address bar"})
			return
		}
		h.exchange(w, r, tok)
		return
	}
	h.render(w, r, http.StatusOK, "login", "layout", h.newPage(r, "login", "Sign in"))
}

// loginPost answers POST /login (the form), from this origin only.
func (h *Handler) loginPost(w http.ResponseWriter, r *http.Request) {
	if err := h.cop.Check(r); err != nil {
		h.fail(w, r, &apiError{Status: http.StatusForbidden, Code: "cross_origin", Message: "cross-site requests cannot sign in here"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, bodyError(err))
		return
	}
	h.exchange(w, r, r.PostForm.Get("token"))
}

func (h *Handler) exchange(w http.ResponseWriter, r *http.Request, tok string) {
	tl, ok := h.o.Auth.(TokenLogin)
	if !ok {
		h.fail(w, r, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "this inbox signs reviewers in through a proxy, not with tokens"})
		return
	}
	c, err := tl.Exchange(tok)
	if err != nil {
		e := &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: strings.TrimPrefix(err.Error(), "reviewweb: ")}
		if !errors.Is(err, ErrUnauthenticated) {
			e = h.classify(r.Context(), err)
		}
		h.fail(w, r, e)
		return
	}
	c.Path = h.url("/")
	http.SetCookie(w, c)
	http.Redirect(w, r, h.url("/"), http.StatusSeeOther)
}

// logout answers POST /logout.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if tl, ok := h.o.Auth.(TokenLogin); ok {
		c := tl.Logout(r)
		c.Path = h.url("/")
		http.SetCookie(w, c)
	}
	http.Redirect(w, r, h.url("/login"), http.StatusSeeOther)
}
