#!/bin/sh
# Prints the packages whose tests need neither the local control plane nor a
# Gitea server: what make test-fast runs. A package is left out when its
# test binary links the control plane (local/controlplane) or Gitea
# (local/gitea, whose tests and every user's start a server).
set -eu
cp=github.com/petri-dev/petri/local/controlplane
gitea=github.com/petri-dev/petri/local/gitea
go list -test -f '{{if .ForTest}}{{.ForTest}}{{range .Deps}} {{.}}{{end}}{{end}}' ./... |
  awk -v cp="$cp" -v gitea="$gitea" '
    { slow[$1] += ($1 == gitea)
      for (i = 2; i <= NF; i++) if ($i == cp || $i == gitea) slow[$1] = 1 }
    END { for (p in slow) if (!slow[p]) print p }' | sort
