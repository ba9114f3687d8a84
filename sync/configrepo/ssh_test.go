package configrepo_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/petri-dev/petri/sync/configrepo"
)

// sshGitServer serves repositories under root over ssh, running git's own
// upload-pack for each fetch, and accepts only the given client key.
func sshGitServer(t *testing.T, root string, client ssh.PublicKey) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(hostPriv)
	require.NoError(t, err)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), client.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("key not authorized")
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSH(conn, cfg, root)
		}
	}()
	return ln.Addr().String(), signer.PublicKey()
}

func serveSSH(conn net.Conn, cfg *ssh.ServerConfig, root string) {
	_, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for req := range creqs {
				if req.Type != "exec" {
					if req.WantReply {
						_ = req.Reply(false, nil)
					}
					continue
				}
				var p struct{ Command string }
				_ = ssh.Unmarshal(req.Payload, &p)
				cmd, arg, _ := strings.Cut(p.Command, " ")
				if cmd != "git-upload-pack" {
					_ = req.Reply(false, nil)
					return
				}
				_ = req.Reply(true, nil)
				c := exec.Command("git-upload-pack", filepath.Join(root, filepath.Clean("/"+strings.Trim(arg, "'"))))
				c.Stdin, c.Stdout, c.Stderr = ch, ch, ch.Stderr()
				code := 0
				if err := c.Run(); err != nil {
					code = 1
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
				return
			}
		}()
	}
}

func TestSSHWithKeyAndKnownHosts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "config.git")
	repo := initRepo(t, dir)
	rev := commit(t, dir, repo, map[string]string{"apps/a.yaml": "kind: Application\n"})

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600))

	addr, hostKey := sshGitServer(t, root, sshPub)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(knownHosts, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostKey)+"\n"), 0o600))

	url := "ssh://git@" + addr + "/config.git"
	r, err := configrepo.New(configrepo.Options{URL: url, SSHKeyFile: keyFile, KnownHostsFile: knownHosts})
	require.NoError(t, err)
	snap, err := r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, rev, snap.Revision)
	assert.Contains(t, snap.Files, "apps/a.yaml")

	next := commit(t, dir, repo, map[string]string{"apps/b.yaml": "kind: Application\n"})
	snap, err = r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, next, snap.Revision)

	// A host whose key is not the known one is refused.
	_, otherKey := sshGitServer(t, root, sshPub)
	wrongHosts := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(wrongHosts, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, otherKey)+"\n"), 0o600))
	bad, err := configrepo.New(configrepo.Options{URL: url, SSHKeyFile: keyFile, KnownHostsFile: wrongHosts})
	require.NoError(t, err)
	_, err = bad.Fetch(context.Background())
	assert.Error(t, err)
}
