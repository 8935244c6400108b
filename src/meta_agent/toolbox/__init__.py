"""The tools a run can use: the registry built from the internal tools, the children and the webhooks (build.py)."""

# The resource that lists the toolbox, each child with its status and each tool (front/server.py serves it; the check
# of `meta-agent install` reads it, hosts/check.py, without loading the server).
TOOLBOX_URI = "meta-agent://toolbox"
