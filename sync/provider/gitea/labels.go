// Who added a label: the pull request's timeline, whose label entries
// name the user and whether the label was added (body "1") or removed
// (provider.LabelHistory).

package gitea

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	sdk "code.gitea.io/sdk/gitea"
)

// timelineEntry is what LabelAdder reads of a timeline entry. Its label is
// read by hand: Gitea sends one label object where the SDK expects a list.
type timelineEntry struct {
	Type string `json:"type"`
	Body string `json:"body"`
	User *struct {
		UserName string `json:"login"`
	} `json:"user"`
	Label json.RawMessage `json:"label"`
}

// labelName is the name of a timeline entry's label, sent as an object
// or, by other versions, as a list of one.
func (e timelineEntry) labelName() string {
	var one struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(e.Label, &one) == nil && one.Name != "" {
		return one.Name
	}
	var list []struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(e.Label, &list) == nil && len(list) == 1 {
		return list[0].Name
	}
	return ""
}

// LabelAdders reads the pull request's timeline, oldest first, and
// returns the login of the last user who added each label.
func (p *Provider) LabelAdders(ctx context.Context, repository string, number int) (map[string]string, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	adders := map[string]string{}
	for page := 1; ; page++ {
		if err := p.before(); err != nil {
			return nil, err
		}
		u := fmt.Sprintf("%s/api/v1/repos/%s/%s/issues/%d/timeline?page=%d&limit=%d",
			p.baseURL, url.PathEscape(owner), url.PathEscape(name), number, page, pageSize)
		var entries []timelineEntry
		if err := p.getJSON(ctx, u, &entries); err != nil {
			return nil, fmt.Errorf("timeline of %s#%d: %w", repository, number, err)
		}
		for _, e := range entries {
			if l := e.labelName(); e.Type == "label" && e.Body == "1" && e.User != nil && l != "" {
				adders[l] = e.User.UserName
			}
		}
		if len(entries) < pageSize {
			return adders, nil
		}
	}
}

// getJSON reads one answer of Gitea's API into out, with after's reading
// of its status.
func (p *Provider) getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p.after(&sdk.Response{Response: resp}, fmt.Errorf("%s", http.StatusText(resp.StatusCode)))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
