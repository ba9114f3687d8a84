// Package githttp serves git repositories on disk over git's smart HTTP
// protocol, read-only (clone and fetch), with go-git's upload-pack: how a
// pod on the real node reads the local run's config repository, as sync
// reads a forge's.
package githttp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
)

// Handler serves the repositories of repos (URL path, such as
// "/config.git", to a directory holding a repository) at
// <path>/info/refs?service=git-upload-pack and <path>/git-upload-pack.
// Pushes are refused.
func Handler(repos map[string]string) (http.Handler, error) {
	for _, dir := range repos {
		if _, err := git.PlainOpen(dir); err != nil {
			return nil, fmt.Errorf("serve %s: %w", dir, err)
		}
	}
	loader := dirLoader(repos)
	srv := server.NewServer(loader)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, op, ok := split(r)
		if !ok {
			http.Error(w, "githttp: only clone and fetch (git-upload-pack) are served", http.StatusForbidden)
			return
		}
		if _, known := repos[path]; !known {
			http.NotFound(w, r)
			return
		}
		ep, err := transport.NewEndpoint("file://" + path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sess, err := srv.NewUploadPackSession(ep, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer sess.Close()
		if op == "refs" {
			advertise(w, r, sess)
			return
		}
		uploadPack(w, r, sess)
	}), nil
}

// dirLoader opens a repository on every request, so each sees the
// commits made since.
type dirLoader map[string]string

func (l dirLoader) Load(ep *transport.Endpoint) (storer.Storer, error) {
	dir, ok := l[ep.Path]
	if !ok {
		return nil, transport.ErrRepositoryNotFound
	}
	repo, err := git.PlainOpen(dir)
	if err != nil {
		return nil, err
	}
	return repo.Storer, nil
}

// split reads the repository path and the operation of a request.
func split(r *http.Request) (path, op string, ok bool) {
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == transport.UploadPackServiceName:
		return strings.TrimSuffix(r.URL.Path, "/info/refs"), "refs", true
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/"+transport.UploadPackServiceName):
		return strings.TrimSuffix(r.URL.Path, "/"+transport.UploadPackServiceName), "pack", true
	}
	return "", "", false
}

func advertise(w http.ResponseWriter, r *http.Request, sess transport.UploadPackSession) {
	ar, err := sess.AdvertisedReferencesContext(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ar.Prefix = [][]byte{[]byte("# service=" + transport.UploadPackServiceName), pktline.Flush}
	var buf bytes.Buffer
	if err := ar.Encode(&buf); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(buf.Bytes())
}

func uploadPack(w http.ResponseWriter, r *http.Request, sess transport.UploadPackSession) {
	req := packp.NewUploadPackRequest()
	if err := req.Decode(r.Body); err != nil {
		http.Error(w, "read the upload-pack request: "+err.Error(), http.StatusBadRequest)
		return
	}
	// The whole history is sent whatever depth is asked for (go-git's
	// upload-pack cannot cut it), and the answer's shallow-update is empty:
	// the client then holds a complete history, and its next fetch reports
	// no shallow commits.
	shallow := !req.Depth.IsZero()
	req.Capabilities.Delete(capability.Shallow)
	req.Depth, req.Shallows = packp.DepthCommits(0), nil
	resp, err := sess.UploadPack(r.Context(), req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer resp.Close()
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	if shallow {
		// The empty shallow-update a client that asked for a depth reads.
		_, _ = io.WriteString(w, "0000")
	}
	_ = resp.Encode(w)
}
