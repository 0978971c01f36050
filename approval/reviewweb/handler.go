package reviewweb

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
)

//go:embed assets
var assets embed.FS

// Options configure a Handler. Saver, Store, Auth and Policy are
// required.
type Options struct {
	// Saver holds the threads; it must implement
	// checkpoint.InterruptLister (the SQLite saver and the memory saver
	// do). The handler only reads it.
	Saver checkpoint.Saver
	// Store records the decisions (the application's approval store, on
	// the same database as Saver).
	Store approval.Store
	// Auth identifies the reviewer of every request.
	Auth Authenticator
	// Policy says who may decide what.
	Policy Policy
	// Requester says on whose behalf a call was made, so that they cannot
	// approve it (default RequestedBy).
	Requester RequesterFunc
	// Graph gives the topology a thread runs, to draw it (default:
	// StoredGraph(Saver), the topology its head was saved under; where
	// that is unknown, the drawing shows what the thread's checkpoints
	// show).
	Graph GraphSource
	// Threads, if set, limits the handler to the approvals of threads for
	// which it returns true (approval.Inbox.ForThreads).
	Threads func(thread string) bool
	// Now is the clock of the ages and expiry the pages show (default:
	// the store's, Store.Now). The inbox and the decisions always read
	// the store's clock.
	Now func() time.Time
	// PollInterval is how often live pages look for approvals that
	// appeared or were decided elsewhere (default 1s).
	PollInterval time.Duration
	// Secret keys the cross-site request tokens (at least 32 bytes;
	// default random). Give every replica behind one load balancer the
	// same secret.
	Secret []byte
	// Prefix is the path the handler is mounted at, without a trailing
	// slash ("/review"; default "", the root). The handler strips it.
	Prefix string
	// Logger receives failures the handler answers with 500 (default:
	// discarded).
	Logger *slog.Logger
}

// Handler serves the reviewers' inbox: pages, the JSON API and live
// events. It is safe for concurrent use. Close ends its event streams.
type Handler struct {
	o      Options
	inbox  *approval.Inbox
	mux    *http.ServeMux
	pages  map[string]*template.Template
	cop    *http.CrossOriginProtection
	hub    *hub
	secret []byte
	static http.Handler
}

// New returns a Handler. It fails with an error matching
// approval.ErrInvalidConfig when a required option is missing, the saver
// cannot list pending interrupts, Secret is shorter than 32 bytes, Prefix
// is malformed, or PollInterval is negative.
func New(o Options) (*Handler, error) {
	lister, ok := o.Saver.(checkpoint.InterruptLister)
	switch {
	case o.Saver == nil || o.Store == nil || o.Auth == nil || o.Policy == nil:
		return nil, fmt.Errorf("reviewweb: Options needs a Saver, a Store, an Auth and a Policy: %w", approval.ErrInvalidConfig)
	case !ok:
		return nil, fmt.Errorf("reviewweb: the saver %T cannot list pending interrupts (checkpoint.InterruptLister): %w", o.Saver, approval.ErrInvalidConfig)
	case o.Secret != nil && len(o.Secret) < 32:
		return nil, fmt.Errorf("reviewweb: Options.Secret needs at least 32 bytes: %w", approval.ErrInvalidConfig)
	case o.Prefix != "" && (!strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/")):
		return nil, fmt.Errorf("reviewweb: Options.Prefix %q must start with / and not end with one: %w", o.Prefix, approval.ErrInvalidConfig)
	case o.PollInterval < 0:
		return nil, fmt.Errorf("reviewweb: Options.PollInterval %v is negative (0 means 1s): %w", o.PollInterval, approval.ErrInvalidConfig)
	}
	if o.Now == nil {
		o.Now = o.Store.Now
	}
	if o.Requester == nil {
		o.Requester = RequestedBy
	}
	if o.Graph == nil {
		o.Graph = StoredGraph(o.Saver)
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{o: o, secret: o.Secret, cop: http.NewCrossOriginProtection()}
	if h.secret == nil {
		h.secret = make([]byte, 32)
		if _, err := rand.Read(h.secret); err != nil {
			return nil, fmt.Errorf("reviewweb: random secret: %w", err)
		}
	}
	h.inbox = approval.NewInbox(lister, o.Store)
	if o.Threads != nil {
		h.inbox = h.inbox.ForThreads(o.Threads)
	}
	pages, err := parseTemplates(o.Now)
	if err != nil {
		return nil, err
	}
	h.pages = pages
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	h.static = http.FileServerFS(static)
	h.hub = newHub(h)
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.authed(h.listPage))
	m.HandleFunc("GET /approvals/{id}", h.authed(h.approvalPage))
	m.HandleFunc("POST /approvals/{id}/decide", h.authed(h.changing(h.decideForm)))
	m.HandleFunc("GET /login", h.loginPage)
	m.HandleFunc("POST /login", h.loginPost)
	m.HandleFunc("POST /logout", h.authed(h.changing(h.logout)))
	m.Handle("GET /static/", http.StripPrefix("/static", h.static))
	m.HandleFunc("GET /api/v1/session", h.authed(h.apiSession))
	m.HandleFunc("GET /api/v1/approvals", h.authed(h.apiList))
	m.HandleFunc("GET /api/v1/approvals/{id}", h.authed(h.apiGet))
	m.HandleFunc("POST /api/v1/approvals/{id}/decision", h.authed(h.changing(h.apiDecide)))
	m.HandleFunc("GET /api/v1/events", h.authed(h.events))
	m.HandleFunc("/", h.notFound)
	h.mux = m
}

// Close ends every live event stream and the poller behind them, and
// waits for the poller to stop. Pages and the API keep working; a new
// event stream is refused with 503.
func (h *Handler) Close() error {
	h.hub.close()
	return nil
}

// csp is the Content-Security-Policy of every response: scripts, styles,
// images and connections from the handler itself only; no inline script
// or style, no plugins, no framing, forms post only here.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if strings.HasPrefix(r.URL.Path, h.o.Prefix+"/static/") {
		hd.Set("Cache-Control", "no-cache")
	} else {
		hd.Set("Cache-Control", "no-store")
	}
	if h.o.Prefix == "" {
		h.mux.ServeHTTP(w, r)
		return
	}
	http.StripPrefix(h.o.Prefix, h.mux).ServeHTTP(w, r)
}

// isAPI reports whether r is a request of the JSON API.
func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }

type reviewerKey struct{}

// reviewerOf returns the reviewer that authed stored in r's context.
func reviewerOf(r *http.Request) Reviewer {
	rv, _ := r.Context().Value(reviewerKey{}).(Reviewer)
	return rv
}

// authed runs next with the reviewer of the request, or answers 401.
func (h *Handler) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rv, err := h.o.Auth.Authenticate(r)
		if err == nil {
			err = checkIdentity(rv.Name)
		}
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) {
				h.o.Logger.LogAttrs(r.Context(), slog.LevelError, "reviewweb: authenticator failed", slog.String("error", err.Error()))
				h.fail(w, r, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "the authenticator failed"})
				return
			}
			h.fail(w, r, &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: strings.TrimPrefix(err.Error(), "reviewweb: ")})
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), reviewerKey{}, rv)))
	}
}

// csrfField and csrfHeader carry the cross-site request token of forms
// and of API requests.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// csrfToken is the cross-site request token of rv: a MAC of the
// reviewer's name and session under the handler's secret, so that only a
// page the handler served to them holds it.
func (h *Handler) csrfToken(rv Reviewer) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("lockstep/reviewweb/csrf/v1\x00"))
	m.Write([]byte(rv.Name))
	m.Write([]byte{0})
	m.Write([]byte(rv.Session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// changing guards a state-changing request: it must come from this
// origin (no cross-site Sec-Fetch-Site, an Origin equal to the host) and
// carry the reviewer's token (the form field csrf, or the X-CSRF-Token
// header). Either failure is answered 403 and changes nothing.
func (h *Handler) changing(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h.cop.Check(r); err != nil {
			h.fail(w, r, &apiError{Status: http.StatusForbidden, Code: "cross_origin", Message: "cross-site requests cannot change anything here: " + err.Error()})
			return
		}
		tok := r.Header.Get(csrfHeader)
		if tok == "" && !isAPI(r) {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
			if err := r.ParseForm(); err != nil {
				h.fail(w, r, bodyError(err))
				return
			}
			tok = r.PostForm.Get(csrfField)
		}
		want := h.csrfToken(reviewerOf(r))
		if tok == "" || !hmac.Equal([]byte(tok), []byte(want)) {
			h.fail(w, r, &apiError{Status: http.StatusForbidden, Code: "csrf", Message: "the request lacks this page's token (reload the page and try again)"})
			return
		}
		next(w, r)
	}
}

// maxBodyBytes caps a request body: the largest edit approval accepts,
// a note and room for the rest. A larger body is answered 413.
const maxBodyBytes = approval.MaxArgsBytes + approval.MaxNoteBytes + 64<<10

// bodyError classifies a failure to read a request body.
func bodyError(err error) *apiError {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
			Message: fmt.Sprintf("the request is larger than %d bytes", mb.Limit)}
	}
	return &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "the request body cannot be read: " + err.Error()}
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such page"})
}

// url returns the handler's path p (starting with /) under its prefix.
func (h *Handler) url(p string) string { return h.o.Prefix + p }
