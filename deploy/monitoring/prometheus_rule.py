#!/usr/bin/python3
"""Prints alerts.yaml as a PrometheusRule for the Prometheus operator.

    python3 deploy/monitoring/prometheus_rule.py [--namespace=NS] \\
        [--label=KEY=VALUE ...] | kubectl apply -f -

The rules stay in one file, alerts.yaml, that plain Prometheus loads and
`promtool test rules` tests; this wraps its groups in the operator's
resource. --label adds the labels your Prometheus's ruleSelector asks for
(e.g. --label=release=kube-prometheus-stack).
"""
import argparse
import os
import sys

import yaml


def prometheus_rule(rules, namespace, labels):
    metadata = {"name": "parameter-server",
                "labels": {"app.kubernetes.io/part-of": "parameter-server",
                           **labels}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata,
            "spec": {"groups": rules["groups"]}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "alerts.yaml"))
    parser.add_argument("--namespace", default="")
    parser.add_argument("--label", action="append", default=[],
                        help="KEY=VALUE, added to the resource's labels")
    args = parser.parse_args()
    labels = {}
    for label in args.label:
        key, equals, value = label.partition("=")
        if not equals or not key:
            parser.error("--label must be KEY=VALUE, not " + label)
        labels[key] = value
    with open(args.rules) as f:
        rules = yaml.safe_load(f)
    yaml.safe_dump(prometheus_rule(rules, args.namespace, labels), sys.stdout,
                   sort_keys=False, width=1000)


if __name__ == "__main__":
    main()
