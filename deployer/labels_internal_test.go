package deployer

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func TestReleaseLabelsRewritesEachDocument(t *testing.T) {
	in := `# Source: app/templates/a.yaml
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 2
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: autoscaled
  labels: {team: shop}
spec: {}
---
# an empty document
---
apiVersion: v1
kind: ConfigMapList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: big}
  data: {n: "1"}
  binaryData: {}
---
apiVersion: example.com/v1
kind: Big
metadata: {name: n}
spec:
  count: 9007199254740993
`
	out, err := releaseLabels{release: "web"}.Run(bytes.NewBufferString(in))
	require.NoError(t, err)
	docs := bytes.Split(out.Bytes(), []byte("---\n"))
	require.Len(t, docs, 5, "the empty document is dropped: %s", out)
	var objs []map[string]any
	for _, d := range docs[1:] {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal(d, &m))
		objs = append(objs, m)
	}
	meta := func(i int) map[string]any { return objs[i]["metadata"].(map[string]any) }
	assert.Equal(t, map[string]any{"petri.dev/release": "web"}, meta(0)["labels"])
	assert.Equal(t, map[string]any{"petri.dev/replicas": "2"}, meta(0)["annotations"])
	assert.Equal(t, map[string]any{"petri.dev/release": "web", "team": "shop"}, meta(1)["labels"])
	assert.NotContains(t, meta(1), "annotations", "no replicas in the manifest: nothing is claimed")
	item := objs[2]["items"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"petri.dev/release": "web"}, item["metadata"].(map[string]any)["labels"], "a list's items are labelled")
	assert.Contains(t, string(docs[4]), "count: 9007199254740993", "a number is written as it was read")
}
