package configrepo_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/configrepo"
)

// A failed fetch names the repository without the credentials of its URL
// or of the token file, whatever the server answered.
func TestFetchErrorsCarryNoCredentials(t *testing.T) {
	const planted = "PLANTED-cfg-77a1"
	for _, status := range []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusInternalServerError} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			fmt.Fprintf(w, "no: Authorization: %s query %s\n", r.Header.Get("Authorization"), r.URL.RawQuery)
		}))
		t.Cleanup(srv.Close)
		tokenFile := filepath.Join(t.TempDir(), "token")
		require.NoError(t, os.WriteFile(tokenFile, []byte(planted+"\n"), 0o600))
		for _, u := range []string{
			strings.Replace(srv.URL, "http://", "http://ci:"+planted+"@", 1) + "/config.git?private_token=" + planted,
			srv.URL + "/config.git",
		} {
			repo, err := configrepo.New(configrepo.Options{URL: u, Branch: "main", TokenFile: tokenFile})
			require.NoError(t, err)
			_, err = repo.Fetch(context.Background())
			require.Error(t, err)
			assert.NotContains(t, err.Error(), planted, "HTTP %d", status)
			assert.Contains(t, err.Error(), strings.TrimPrefix(srv.URL, "http://"), "the host is named")
		}
	}
}
