"""soak/report"""
