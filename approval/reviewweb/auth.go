package reviewweb

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// Reviewer is the person making a request, as an Authenticator
// identifies them.
type Reviewer struct {
	// Name is recorded with every decision they make (approval.Verdict's
	// Reviewer); it must pass approval.CheckReviewer.
	Name string
	// Groups are the teams they belong to, for a Policy (Grants) to match.
	Groups []string
	// Session is an opaque value that changes whenever they sign in again
	// (a session ID), or "" for an authenticator without sessions. The
	// cross-site request token is bound to Name and Session.
	Session string
}

// Authenticator maps a request to the reviewer making it. No request
// reaches an approval without one: a failure is answered 401 and nothing
// is shown or recorded.
type Authenticator interface {
	// Authenticate returns the reviewer making r, or an error matching
	// ErrUnauthenticated (answered 401) when r does not say who, or says
	// it in a way that cannot be trusted. Any other error is answered 500.
	Authenticate(r *http.Request) (Reviewer, error)
}

// Errors of identity and authorization. Match them with errors.Is.
var (
	// ErrUnauthenticated: the request does not identify a reviewer
	// (answered 401).
	ErrUnauthenticated = errors.New("reviewweb: not signed in")
	// ErrForbidden: the reviewer may not do this (answered 403): the
	// policy does not let them decide the request, they requested the call
	// themselves, or the request came from another site.
	ErrForbidden = errors.New("reviewweb: forbidden")
)

// unauthenticated returns an error matching ErrUnauthenticated that says
// why.
func unauthenticated(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnauthenticated, fmt.Sprintf(format, args...))
}

// checkIdentity refuses a reviewer name that no decision could record.
func checkIdentity(name string) error {
	if err := approval.CheckReviewer(name); err != nil {
		return unauthenticated("the identity is not usable for decisions (%v)", err)
	}
	return nil
}

// TrustedProxy authenticates reviewers by a header that an authenticating
// reverse proxy (an OAuth2 or SAML proxy, an identity-aware gateway) sets
// after it signed them in. The header is believed only on connections from
// the proxy's addresses: a request from anywhere else is refused, whatever
// it carries, so a client that reaches the handler directly cannot name
// itself. The proxy must remove the header from what clients send.
type TrustedProxy struct {
	// Header carries the reviewer's name (for example
	// "X-Forwarded-Email"). Required.
	Header string
	// GroupsHeader, if set, carries the reviewer's groups, separated by
	// commas.
	GroupsHeader string
	// Proxies are the addresses the proxy connects from. Required; a
	// request whose peer address (http.Request.RemoteAddr) is outside
	// them is refused.
	Proxies []netip.Prefix
}

// Authenticate implements Authenticator. It returns an error matching
// ErrUnauthenticated when the peer is not one of Proxies, when the header
// is missing, empty or repeated, and when the name fails
// approval.CheckReviewer.
func (p *TrustedProxy) Authenticate(r *http.Request) (Reviewer, error) {
	if p.Header == "" || len(p.Proxies) == 0 {
		return Reviewer{}, unauthenticated("the trusted-proxy authenticator has no header or no proxy addresses configured")
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return Reviewer{}, unauthenticated("the peer address %q cannot be read", r.RemoteAddr)
	}
	addr := ap.Addr().Unmap()
	trusted := false
	for _, pfx := range p.Proxies {
		if pfx.Contains(addr) {
			trusted = true
			break
		}
	}
	if !trusted {
		return Reviewer{}, unauthenticated("requests must come through the authenticating proxy, not from %s", addr)
	}
	vals := r.Header.Values(p.Header)
	switch {
	case len(vals) == 0 || strings.TrimSpace(vals[0]) == "":
		return Reviewer{}, unauthenticated("the proxy did not name the reviewer (header %s)", p.Header)
	case len(vals) > 1:
		return Reviewer{}, unauthenticated("the proxy named the reviewer more than once (header %s)", p.Header)
	}
	rv := Reviewer{Name: strings.TrimSpace(vals[0])}
	if err := checkIdentity(rv.Name); err != nil {
		return Reviewer{}, err
	}
	if p.GroupsHeader != "" {
		for _, v := range r.Header.Values(p.GroupsHeader) {
			for g := range strings.SplitSeq(v, ",") {
				if g = strings.TrimSpace(g); g != "" {
					rv.Groups = append(rv.Groups, g)
				}
			}
		}
	}
	return rv, nil
}

// LocalToken authenticates reviewers of a handler run for local use
// (lockstep serve): Issue makes a one-time login token for a reviewer,
// which the browser exchanges once (GET or POST /login) for a session
// cookie. A token works once and for TokenTTL; a session lasts SessionTTL.
// Sessions live in memory: restarting the process signs everybody out. It
// is safe for concurrent use.
type LocalToken struct {
	o LocalTokenOptions

	mu       sync.Mutex
	tokens   map[string]pendingLogin // by hash of the token
	sessions map[string]session      // by hash of the session ID
}

// LocalTokenOptions configure a LocalToken. Zero values mean the
// defaults; negative durations are refused (NewLocalToken).
type LocalTokenOptions struct {
	// TokenTTL is how long an unused login token works (default 1 hour).
	TokenTTL time.Duration
	// SessionTTL is how long a session lasts (default 12 hours).
	SessionTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Secure marks the session cookie Secure (send it over HTTPS only).
	// Set it when the handler is served over TLS or behind a TLS proxy.
	Secure bool
}

type pendingLogin struct {
	name    string
	expires time.Time
}

type session struct {
	id      string // the hash, as Reviewer.Session
	name    string
	expires time.Time
}

// sessionCookie is the name of LocalToken's cookie.
const sessionCookie = "lockstep_session"

// NewLocalToken returns a LocalToken with no tokens and no sessions. It
// returns an error matching approval.ErrInvalidConfig, and no LocalToken,
// when o.TokenTTL or o.SessionTTL is negative.
func NewLocalToken(o LocalTokenOptions) (*LocalToken, error) {
	switch {
	case o.TokenTTL < 0:
		return nil, fmt.Errorf("reviewweb: LocalTokenOptions.TokenTTL %v is negative (0 means an hour): %w", o.TokenTTL, approval.ErrInvalidConfig)
	case o.SessionTTL < 0:
		return nil, fmt.Errorf("reviewweb: LocalTokenOptions.SessionTTL %v is negative (0 means 12 hours): %w", o.SessionTTL, approval.ErrInvalidConfig)
	}
	if o.TokenTTL == 0 {
		o.TokenTTL = time.Hour
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &LocalToken{o: o, tokens: map[string]pendingLogin{}, sessions: map[string]session{}}, nil
}

// randomToken returns 256 random bits, base64url.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reviewweb: random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// digest is what the maps are keyed by: a token or session ID is never
// kept in the clear.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Issue returns a new one-time login token for the reviewer name. It
// fails when name does not pass approval.CheckReviewer (an error matching
// ErrUnauthenticated) or when no random bits can be read.
func (l *LocalToken) Issue(name string) (string, error) {
	if err := checkIdentity(name); err != nil {
		return "", err
	}
	tok, err := randomToken()
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	l.tokens[digest(tok)] = pendingLogin{name: name, expires: l.o.Now().Add(l.o.TokenTTL)}
	return tok, nil
}

// sweep drops expired tokens and sessions. l.mu must be held.
func (l *LocalToken) sweep() {
	now := l.o.Now()
	for k, t := range l.tokens {
		if !now.Before(t.expires) {
			delete(l.tokens, k)
		}
	}
	for k, s := range l.sessions {
		if !now.Before(s.expires) {
			delete(l.sessions, k)
		}
	}
}

// Exchange spends a login token and returns the cookie of a new session
// for its reviewer. It fails with an error matching ErrUnauthenticated
// for a token that is unknown, used or expired.
func (l *LocalToken) Exchange(token string) (*http.Cookie, error) {
	id, err := randomToken()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	k := digest(token)
	pl, ok := l.tokens[k]
	if !ok || token == "" {
		return nil, unauthenticated("the login token is unknown, used or expired: ask for a new one")
	}
	delete(l.tokens, k)
	exp := l.o.Now().Add(l.o.SessionTTL)
	l.sessions[digest(id)] = session{id: digest(id), name: pl.name, expires: exp}
	return &http.Cookie{Name: sessionCookie, Value: id, Path: "/", Expires: exp, MaxAge: int(l.o.SessionTTL / time.Second),
		HttpOnly: true, Secure: l.o.Secure, SameSite: http.SameSiteStrictMode}, nil
}

// Logout ends the session r carries, if any, and returns the cookie that
// clears it in the browser.
func (l *LocalToken) Logout(r *http.Request) *http.Cookie {
	if c, err := r.Cookie(sessionCookie); err == nil {
		l.mu.Lock()
		delete(l.sessions, digest(c.Value))
		l.mu.Unlock()
	}
	return &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: l.o.Secure, SameSite: http.SameSiteStrictMode}
}

// Authenticate implements Authenticator: the reviewer of the session
// cookie. It returns an error matching ErrUnauthenticated without a
// cookie, or with one of an unknown or expired session.
func (l *LocalToken) Authenticate(r *http.Request) (Reviewer, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return Reviewer{}, unauthenticated("sign in with the login token")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sessions[digest(c.Value)]
	if !ok || !l.o.Now().Before(s.expires) {
		return Reviewer{}, unauthenticated("the session ended: sign in again with a new login token")
	}
	return Reviewer{Name: s.name, Session: s.id}, nil
}

// TokenLogin is an Authenticator that signs reviewers in by exchanging a
// one-time token for a session (LocalToken is one). The handler serves
// its /login and /logout.
type TokenLogin interface {
	Authenticator
	// Exchange spends token and returns the session's cookie, or an error
	// matching ErrUnauthenticated.
	Exchange(token string) (*http.Cookie, error)
	// Logout ends r's session and returns the cookie that clears it.
	Logout(r *http.Request) *http.Cookie
}

var _ TokenLogin = (*LocalToken)(nil)
