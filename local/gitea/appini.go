package gitea

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"text/template"
)

// appINI is the configuration of a Gitea for tests and the demo: SQLite, no
// installer, no mail, no SSH, no Actions or packages, webhooks allowed to
// loopback addresses only, logs at Warn into a file of its work directory.
var appINI = template.Must(template.New("app.ini").Parse(`APP_NAME = Petri local forge
RUN_MODE = prod
RUN_USER = {{.RunUser}}
WORK_PATH = {{.Dir}}
{{- if .Root}}
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true
{{- end}}

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {{.Port}}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:{{.Port}}/
APP_DATA_PATH = {{.Dir}}/data
STATIC_ROOT_PATH = {{.StaticDir}}
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
OFFLINE_MODE = true

[database]
DB_TYPE = sqlite3
PATH = {{.Dir}}/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = {{.Dir}}/repositories
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = {{.SecretKey}}
INTERNAL_TOKEN = {{.InternalToken}}
PASSWORD_COMPLEXITY = off
MIN_PASSWORD_LENGTH = 8
PASSWORD_CHECK_PWN = false
; webhooks may go to loopback addresses (sync on this machine) only
ALLOWED_HOST_LIST = loopback

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
ENABLE_NOTIFY_MAIL = false
DEFAULT_KEEP_EMAIL_PRIVATE = true

[mailer]
ENABLED = false

[webhook]
DELIVER_TIMEOUT = 5

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[actions]
ENABLED = false

[packages]
ENABLED = false

[cron.update_checker]
ENABLED = false

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = {{.Dir}}/log
`))

type appINIValues struct {
	Dir, StaticDir, RunUser  string
	Port                     int
	Root                     bool
	SecretKey, InternalToken string
}

// newSecrets fills the secret key and the internal token, once per server:
// a rewritten app.ini (another port) keeps them.
func (v *appINIValues) newSecrets() error {
	var err error
	if v.SecretKey, err = randomHex(32); err != nil {
		return err
	}
	v.InternalToken, err = randomHex(32)
	return err
}

func writeAppINI(path string, v appINIValues) error {
	var b bytes.Buffer
	if err := appINI.Execute(&b, v); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
