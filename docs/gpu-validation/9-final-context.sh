#!/usr/bin/env bash
# After device-validate: the GPT at context 512 (two GPU attention blocks) and 1024 (four), ours
# against the baseline, alternating: compute ms of the last 20 of 60 steps. Needs the Open MPI
# environment device-validate sets (OPAL_PREFIX, PMIX_INSTALL_PREFIX, OMPI_MCA_ess_singleton_isolated=1).
R=/tmp/tower-device
for ctx in 512 1024; do
  for p in fp32 bf16; do
    for b in "current $R/run $R/root/bin/tower" "baseline $R/run-baseline $R/baseline/tower"; do
      read -r label runner prog <<<"$b"
      m=/tmp/ctx-$label.jsonl; rm -f $m
      timeout 120 "$runner" "$prog" train --device cuda --model gpt --data $R/fortunes.txt --context $ctx \
        --precision $p --batch 16 --max-steps 60 --log-every 20 --metrics $m >/tmp/ctx.log 2>&1 || { echo "FAIL $label $ctx $p"; tail -3 /tmp/ctx.log; continue; }
      python3 -c "
import json,sys
l=[json.loads(x) for x in open('$m')]; s=[x for x in l if x.get('event')=='step'][-1]
print('ctx $ctx $p $label: %.2f ms compute, %.0f tokens/s, loss %.4f, peak %.2f GiB' % (s['compute_ms'], s['tokens_per_s'], s['loss'], s['peak_memory_bytes']/2**30))"
    done
  done
done
