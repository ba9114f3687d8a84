package forge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/sync/provider"
)

// fakeComments is one pull request's comments, by id.
type fakeComments struct {
	byID  map[int64]string
	next  int64
	calls []string
}

func (f *fakeComments) commentCalls(self string) CommentCalls {
	return CommentCalls{
		Find: func(context.Context) (CommentRef, bool, error) {
			f.calls = append(f.calls, "find")
			for id := int64(1); id <= f.next; id++ {
				if b, ok := f.byID[id]; ok && IsOwn(self, b, self, "<!-- m -->") {
					return CommentRef{ID: id, Body: b}, true, nil
				}
			}
			return CommentRef{}, false, nil
		},
		Edit: func(_ context.Context, id int64, body string) (int64, error) {
			f.calls = append(f.calls, "edit")
			if _, ok := f.byID[id]; !ok {
				return 0, fmt.Errorf("edit: %w", provider.ErrNotFound)
			}
			f.byID[id] = body
			return id, nil
		},
		Create: func(_ context.Context, body string) (int64, error) {
			f.calls = append(f.calls, "create")
			f.next++
			f.byID[f.next] = body
			return f.next, nil
		},
	}
}

func TestUpsertEditsInPlaceAndWritesAgainWhenDeleted(t *testing.T) {
	ctx := context.Background()
	f := &fakeComments{byID: map[int64]string{}}
	m := NewComments()
	upsert := func(body string) {
		t.Helper()
		if err := m.Upsert(ctx, "Acme/Shop", 7, body, f.commentCalls("bot")); err != nil {
			t.Fatal(err)
		}
	}
	step := func(want ...string) {
		t.Helper()
		if fmt.Sprint(f.calls) != fmt.Sprint(want) {
			t.Fatalf("calls %v, want %v", f.calls, want)
		}
		f.calls = nil
	}
	upsert("<!-- m --> one")
	step("find", "create")
	upsert("<!-- m --> one")
	step()
	upsert("<!-- m --> two")
	step("edit")
	delete(f.byID, 1)
	upsert("<!-- m --> three")
	step("edit", "create")
	if len(f.byID) != 1 || f.byID[2] != "<!-- m --> three" {
		t.Fatalf("comments %v", f.byID)
	}
	m.ForgetRepository("acme/shop")
	upsert("<!-- m --> three")
	step("find")
}

func TestIsOwn(t *testing.T) {
	if !IsOwn("Bot", "x <!-- m -->", "bot", "<!-- m -->") || IsOwn("mallory", "<!-- m -->", "bot", "<!-- m -->") || IsOwn("bot", "x", "bot", "<!-- m -->") {
		t.Fatal("IsOwn")
	}
}

func TestTokenFileIsReadAgainWhenItChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	f := NewTokenFile("forge", path, "")
	if _, err := f.Token(); err == nil {
		t.Fatal("a missing file with no token read yet is an error")
	}
	write := func(s string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	write("one\n", now)
	if tok, err := f.Token(); err != nil || tok != "one" {
		t.Fatalf("%q %v", tok, err)
	}
	write("two", now.Add(time.Second))
	if tok, err := f.Token(); err != nil || tok != "two" {
		t.Fatalf("%q %v", tok, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if tok, err := f.Token(); err != nil || tok != "two" {
		t.Fatalf("the last token read stays while the file is gone: %q %v", tok, err)
	}
}

func TestBlockerRefusesUntilTheLatestLimit(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	b := NewBlocker(clk, "wait")
	if err := b.Before(); err != nil {
		t.Fatal(err)
	}
	_ = b.Block(time.Unix(1060, 0), errors.New("429"))
	_ = b.Block(time.Unix(1030, 0), errors.New("429"))
	var rle *provider.RateLimitError
	if err := b.Before(); !errors.As(err, &rle) || !rle.Until.Equal(time.Unix(1060, 0)) {
		t.Fatalf("%v", err)
	}
	clk.SetTime(time.Unix(1060, 0))
	if err := b.Before(); err != nil {
		t.Fatal(err)
	}
}
