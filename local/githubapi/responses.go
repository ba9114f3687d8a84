package githubapi

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// paginate answers one page of a listing, with GitHub's Link header and a
// conditional-request ETag.
func (s *Server) paginate(w http.ResponseWriter, r *http.Request, items []any) {
	q := r.URL.Query()
	perPage, _ := strconv.Atoi(q.Get("per_page"))
	if perPage <= 0 {
		perPage = 30
	}
	page, _ := strconv.Atoi(q.Get("page"))
	if page <= 0 {
		page = 1
	}
	last := (len(items) + perPage - 1) / perPage
	if last == 0 {
		last = 1
	}
	lo := min((page-1)*perPage, len(items))
	hi := min(page*perPage, len(items))
	link := func(p int, rel string) string {
		u := *r.URL
		u.Scheme, u.Host = "http", r.Host
		qq := u.Query()
		qq.Set("page", strconv.Itoa(p))
		qq.Set("per_page", strconv.Itoa(perPage))
		u.RawQuery = qq.Encode()
		return fmt.Sprintf("<%s>; rel=%q", u.String(), rel)
	}
	var links []string
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"), link(page-1, "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	s.writeCached(w, r, items[lo:hi])
}

// writeCached answers a GET with an ETag; a matching If-None-Match gets 304
// and costs no rate limit, as on GitHub.
func (s *Server) writeCached(w http.ResponseWriter, r *http.Request, body any) {
	data, _ := json.Marshal(body)
	sum := sha256.Sum256(data)
	etag := fmt.Sprintf(`W/"%x"`, sum[:16])
	w.Header().Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		s.rateHeaders(w)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.charge(w)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}
