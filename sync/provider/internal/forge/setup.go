package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/provider"
)

// Setup is what a forge's provider is built from, read once from its
// options: the API's base URL, the transport and timeout of the HTTP client
// given (Go's default transport and no timeout when none), the token of
// each request and the clock.
type Setup struct {
	BaseURL   *url.URL
	Transport http.RoundTripper
	Timeout   time.Duration
	Token     func() (string, error)
	Clock     clock.PassiveClock
}

// NewSetup checks a provider's options; forge ("gitea", "gitlab") begins
// its errors. The token is the file's (read again when it changes, the given
// token until it is first read) or else the given one; one of them must be
// there. Nothing is called.
func NewSetup(forge, baseURL string, hc *http.Client, token, tokenFile string, clk clock.PassiveClock) (Setup, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Setup{}, fmt.Errorf("%s base url %q: must be an http(s) URL", forge, baseURL)
	}
	s := Setup{BaseURL: u, Transport: http.DefaultTransport, Clock: clk}
	if hc != nil {
		if hc.Transport != nil {
			s.Transport = hc.Transport
		}
		s.Timeout = hc.Timeout
	}
	tok := strings.TrimSpace(token)
	if tokenFile != "" {
		s.Token = NewTokenFile(forge, tokenFile, tok).Token
	} else {
		s.Token = func() (string, error) {
			if tok == "" {
				return "", errors.New(forge + " token: neither a token nor a token file given")
			}
			return tok, nil
		}
	}
	if _, err := s.Token(); err != nil {
		return Setup{}, err
	}
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	return s, nil
}

// FindOwn is CommentCalls.Find over a listing of a pull request's comments:
// the first that IsOwn says is sync's.
func FindOwn(list func(context.Context) ([]provider.Comment, error), self, marker string) func(context.Context) (CommentRef, bool, error) {
	return func(ctx context.Context) (CommentRef, bool, error) {
		cs, err := list(ctx)
		if err != nil {
			return CommentRef{}, false, err
		}
		for _, c := range cs {
			if IsOwn(c.Author, c.Body, self, marker) {
				return CommentRef{ID: c.ID, Body: c.Body}, true, nil
			}
		}
		return CommentRef{}, false, nil
	}
}
