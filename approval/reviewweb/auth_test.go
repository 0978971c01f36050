package reviewweb_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval/reviewweb"
)

// TestTrustedProxy: the header is believed only from the proxy's
// addresses, once, and only for a name decisions can record.
func TestTrustedProxy(t *testing.T) {
	p := loopbackProxy()
	for _, tc := range []struct {
		name   string
		remote string
		hdr    []string
		groups string
		want   string
	}{
		{"from the proxy", "127.0.0.1:5555", []string{"bob@example.com"}, "desk, ops", "bob@example.com"},
		{"IPv6 loopback", "[::1]:5555", []string{"bob@example.com"}, "", "bob@example.com"},
		{"from elsewhere", "10.1.2.3:5555", []string{"bob@example.com"}, "", ""},
		{"no header", "127.0.0.1:5555", nil, "", ""},
		{"empty header", "127.0.0.1:5555", []string{" "}, "", ""},
		{"two headers", "127.0.0.1:5555", []string{"bob@example.com", "eve@example.com"}, "", ""},
		{"a direction override", "127.0.0.1:5555", []string{"bob\u202E@example.com"}, "", ""},
		{"the system's name", "127.0.0.1:5555", []string{"system:expiry"}, "", ""},
		{"an unreadable peer", "pipe", []string{"bob@example.com"}, "", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		for _, h := range tc.hdr {
			r.Header.Add(userHeader, h)
		}
		if tc.groups != "" {
			r.Header.Set("X-Test-Groups", tc.groups)
		}
		rv, err := p.Authenticate(r)
		switch {
		case tc.want == "" && !errors.Is(err, reviewweb.ErrUnauthenticated):
			t.Errorf("%s: Authenticate = %+v, %v; want ErrUnauthenticated", tc.name, rv, err)
		case tc.want != "" && (err != nil || rv.Name != tc.want):
			t.Errorf("%s: Authenticate = %+v, %v; want %s", tc.name, rv, err, tc.want)
		case tc.groups != "" && strings.Join(rv.Groups, "|") != "desk|ops":
			t.Errorf("%s: groups %v", tc.name, rv.Groups)
		}
	}
	if _, err := (&reviewweb.TrustedProxy{Header: userHeader}).Authenticate(httptest.NewRequest("GET", "/", nil)); !errors.Is(err, reviewweb.ErrUnauthenticated) {
		t.Errorf("a proxy authenticator without addresses: %v", err)
	}
}

// TestLocalToken: a one-time token signs one browser in, once; the
// session's cookie is HttpOnly and SameSite=Strict; sign-out ends it;
// tokens and sessions expire.
func TestLocalToken(t *testing.T) {
	f := newFixture(t)
	id := f.start(t, "t1", defaultCall())
	lt := newLocalToken(t, reviewweb.LocalTokenOptions{Now: f.clock.Now, TokenTTL: time.Hour, SessionTTL: 2 * time.Hour})
	s := newServer(t, f, func(o *reviewweb.Options) { o.Auth = lt })
	tok, err := lt.Issue("priya")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lt.Issue("bad\u202Ename"); !errors.Is(err, reviewweb.ErrUnauthenticated) {
		t.Errorf("Issue for an unusable name: %v", err)
	}
	c := s.client(t, "")
	resp, body := c.do("GET", "/", "", nil)
	wantStatus(t, "before sign-in", resp, body, 401, "")
	if !strings.Contains(body, `name="token"`) {
		t.Error("the 401 page offers no sign-in form")
	}
	resp, body = c.do("GET", "/login?token="+url.QueryEscape(tok), "", nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	ck := resp.Header.Get("Set-Cookie")
	if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") || !strings.Contains(ck, "Path=/") {
		t.Errorf("session cookie %q", ck)
	}
	resp, body = c.do("GET", "/approvals/"+id, "", nil)
	wantStatus(t, "signed in", resp, body, 200, "")
	if !strings.Contains(body, "signed in as <bdi>priya</bdi>") {
		t.Error("the page does not say who is signed in")
	}
	// The token is spent: another browser cannot use it.
	other := s.client(t, "")
	resp, body = other.do("GET", "/login?token="+url.QueryEscape(tok), "", nil)
	wantStatus(t, "token reused", resp, body, 401, "")
	resp, body = other.do("POST", "/login", "token="+url.QueryEscape(tok), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	wantStatus(t, "token reused by form", resp, body, 401, "")
	// A cross-site sign-in is refused, by link or by form, and spends no
	// token.
	tok2, _ := lt.Issue("carol")
	for _, site := range []string{"cross-site", "same-site"} {
		resp, body = other.do("GET", "/login?token="+url.QueryEscape(tok2), "", map[string]string{"Sec-Fetch-Site": site})
		wantStatus(t, site+" sign-in link", resp, body, 403, "")
		if ck := resp.Header.Get("Set-Cookie"); ck != "" {
			t.Errorf("a %s sign-in link set a cookie: %q", site, ck)
		}
	}
	resp, body = other.do("POST", "/login", "token="+url.QueryEscape(tok2), map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"})
	wantStatus(t, "cross-site sign-in", resp, body, 403, "")
	resp, _ = other.do("POST", "/login", "token="+url.QueryEscape(tok2), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("form sign-in: %d", resp.StatusCode)
	}
	// The session decides with its token; sign-out ends it.
	resp, body = c.do("GET", "/api/v1/session", "", nil)
	var sess struct {
		CSRF string `json:"csrf_token"`
	}
	if err := jsonUnmarshal(body, &sess); err != nil || resp.StatusCode != 200 {
		t.Fatalf("session: %d %s", resp.StatusCode, body)
	}
	c.csrf = sess.CSRF
	resp, body = c.decide(id, `{"outcome":"approved"}`)
	wantStatus(t, "decide in a session", resp, body, 200, "")
	if d := f.decided(t, id); d == nil || d.Reviewer != "priya" {
		t.Errorf("recorded %+v", d)
	}
	resp, _ = c.do("POST", "/logout", "csrf="+url.QueryEscape(c.csrf), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	resp, body = c.do("GET", "/", "", nil)
	wantStatus(t, "after sign-out", resp, body, 401, "")
	// Tokens and sessions expire.
	tok3, _ := lt.Issue("dan")
	f.clock.Add(3 * time.Hour)
	resp, body = s.client(t, "").do("GET", "/login?token="+url.QueryEscape(tok3), "", nil)
	wantStatus(t, "expired token", resp, body, 401, "")
	resp, body = other.do("GET", "/", "", nil)
	wantStatus(t, "expired session", resp, body, 401, "")
}
