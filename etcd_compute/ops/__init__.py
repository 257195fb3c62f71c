"""The operator's instance and host operations, under `schedule.py`'s commands.

    operations      show, list, destroy, hosts, console, wait
    lifecycle       stop, start, reboot, rebuild, resize, events: refuse or ask, then follow
    maintenance     host disable, enable, show, drain
    console_follow  console --follow, from an etcd watch
    queue_client    asking the scheduler service (the queue in etcd), waiting, withdrawing
"""
